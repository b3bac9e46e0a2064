package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// envName is the environment variable behind a flag: GATEWAY_ plus the
// flag's name in upper case with dashes as underscores.
func envName(flagName string) string {
	return "GATEWAY_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// aliases are conventional variables read when the GATEWAY_ one is unset.
var aliases = map[string]string{
	"database-url":        "DATABASE_URL",
	"database-direct-url": "DATABASE_DIRECT_URL",
	"redis-url":           "REDIS_URL",
}

// parseFlags parses args into fs, then fills every flag not given on the
// command line from its environment variable. Precedence: flag, GATEWAY_*
// variable, alias variable, default.
func parseFlags(fs *flag.FlagSet, args []string) error {
	fs.VisitAll(func(f *flag.Flag) {
		env := envName(f.Name)
		if alias, ok := aliases[f.Name]; ok {
			env += " or " + alias
		}
		f.Usage += " [$" + env + "]"
	})
	if err := fs.Parse(args); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || err != nil {
			return
		}
		v, ok := os.LookupEnv(envName(f.Name))
		if !ok {
			if alias, has := aliases[f.Name]; has {
				v, ok = os.LookupEnv(alias)
			}
		}
		if ok {
			if e := f.Value.Set(v); e != nil {
				err = fmt.Errorf("invalid value %q for %s: %v", v, envName(f.Name), e)
			}
		}
	})
	return err
}

// parseCommand parses a command's flags (see parseFlags) and refuses stray
// arguments. When the command must not run it reports why on stderr and
// returns false with the exit status: 0 after --help, 2 after a mistake.
func parseCommand(fs *flag.FlagSet, args []string, stderr io.Writer) (exit int, run bool) {
	err := parseFlags(fs, args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0, false
	case err != nil:
		fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
		return 2, false
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return 2, false
	}
	return 0, true
}
