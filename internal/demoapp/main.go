package main

import (
	"fmt"
	"io"
	"os"
)

// version is set at link time with -X main.version=...; DEMOAPP_VERSION wins.
var version = "dev"

const usage = `usage:
  demoapp [serve]              serve HTTP on :$PORT (default 8080)
  demoapp --version            print the version
  demoapp health [--url URL]   exit 0 if URL answers 200, else 1
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// currentVersion lets image ENV override the linked-in version, so tests need
// to build the binary only once for any number of "releases".
func currentVersion() string {
	if v := os.Getenv("DEMOAPP_VERSION"); v != "" {
		return v
	}
	return version
}

// run is main without the exit, so tests can call it in-process.
func run(args []string, stdout, stderr io.Writer) int {
	cmd := "serve"
	if len(args) > 0 {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "--version", "-version", "version":
		fmt.Fprintln(stdout, currentVersion())
		return 0
	case "serve":
		return serveCmd(args, stderr)
	case "health":
		return healthCmd(args, stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "demoapp: unknown command %q\n%s", cmd, usage)
		return 2
	}
}
