package main

import (
	"flag"
	"fmt"
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
	"database-url": "DATABASE_URL",
	"redis-url":    "REDIS_URL",
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
