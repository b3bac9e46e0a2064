// Command gateway is the AI chat gateway: an edge proxy in front of
// OpenAI-compatible model servers, with its operator tools.
//
//	gateway [serve] [flags]   serve the API (the default)
//	gateway migrate           apply the embedded schema migrations
//	gateway admin ...         manage organizations, users, keys, service tokens
//	gateway sim [flags]       serve the upstream simulator
//	gateway version           print version information
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/storage"
)

// commit may be stamped at build time with -ldflags "-X main.commit=…";
// otherwise it comes from the build's VCS information, or is "unknown".
var commit string

func buildCommit() string {
	if commit != "" {
		return commit
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && s.Value != "" {
				return s.Value
			}
		}
	}
	return "unknown"
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: gateway [command] [flags]

commands:
  serve     serve the API (the default when no command is given)
  migrate   apply the embedded schema migrations to DATABASE_URL
  admin     manage organizations, users, keys and service tokens
  sim       serve the upstream simulator (bench/sim/README.md)
  version   print the build's commit, API version and schema version

Run 'gateway <command> --help' for a command's flags.
`

func run(args []string, stdout, stderr io.Writer) int {
	cmd := "serve"
	// Flags alone are serve's, except a request for help: that is the
	// command list (serve's flags are 'gateway serve --help').
	if len(args) > 0 && (!strings.HasPrefix(args[0], "-") || isHelp(args[0])) {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		return runServe(args, stdout, stderr)
	case "migrate":
		return runMigrate(args, stdout, stderr)
	case "sim":
		return runSim(args, stdout, stderr)
	case "admin":
		return runAdmin(args, stdout, stderr)
	case "version":
		fs := flag.NewFlagSet("gateway version", flag.ContinueOnError)
		fs.SetOutput(stderr)
		fs.Usage = func() {
			fmt.Fprint(stderr, "usage: gateway version\n\nPrint the build's commit, API version and schema version as JSON.\n")
		}
		if exit, run := parseCommand(fs, args, stderr); !run {
			return exit
		}
		return printJSON(stdout, map[string]any{
			"commit":         buildCommit(),
			"api_version":    codec.CurrentVersion.String(),
			"schema_version": storage.BinaryVersion(),
		})
	default:
		if isHelp(cmd) {
			fmt.Fprint(stdout, usage)
			return 0
		}
		fmt.Fprintf(stderr, "gateway: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
}

// isHelp reports whether arg asks for help: the word help, or a spelling
// the flag package reads as -h or -help.
func isHelp(arg string) bool {
	switch arg {
	case "help", "-h", "-help", "--h", "--help":
		return true
	}
	return false
}

func printJSON(w io.Writer, v any) int {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return 1
	}
	return 0
}
