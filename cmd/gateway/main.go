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
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
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
		return printJSON(stdout, map[string]any{
			"commit":         buildCommit(),
			"api_version":    codec.CurrentVersion.String(),
			"schema_version": storage.BinaryVersion(),
		})
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "gateway: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
}

func printJSON(w io.Writer, v any) int {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return 1
	}
	return 0
}
