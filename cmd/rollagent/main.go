package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/alecthomas/kong"
	"github.com/hashicorp/go-hclog"
	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/coordinator"
)

// version is set by the Makefile with -ldflags.
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// exitCode carries kong's requested exit (for --help) out of the parser.
type exitCode int

// run is main without the process: tests call it with their own args and
// writers.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) (code int) {
	var cli CLI
	parser, err := newParser(&cli, stdout, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "rollagent: %v\n", err)
		return 2
	}
	defer func() {
		if r := recover(); r != nil {
			c, ok := r.(exitCode)
			if !ok {
				panic(r)
			}
			code = int(c)
		}
	}()
	kctx, err := parser.Parse(args)
	if err != nil {
		fmt.Fprintf(stderr, "rollagent: error: %v\n", err)
		return usageExit(err)
	}
	if err := cli.Globals.checkTimeout(); err != nil {
		fmt.Fprintf(stderr, "rollagent: error: %v\n", err)
		return usageExitOf(kctx)
	}
	logger := newLogger(&cli.Globals, stderr)
	cctx, cancel := commandContext(ctx, kctx, &cli.Globals)
	defer cancel()
	kctx.BindTo(cctx, (*context.Context)(nil))
	kctx.BindTo(logger, (*hclog.Logger)(nil))
	kctx.Bind(&cli.Globals)
	kctx.BindTo(stdout, (*io.Writer)(nil))
	kctx.Bind(warnings{stderr})
	if err := explainDeadline(cctx, ctx, &cli.Globals, kctx.Run()); err != nil {
		if errors.Is(err, errChanges) {
			return exitChanges
		}
		if !errors.Is(err, errQuiet) {
			fmt.Fprintf(stderr, "rollagent: error: %v\n", err)
		}
		return 1
	}
	return 0
}

func newParser(cli *CLI, stdout, stderr io.Writer) (*kong.Kong, error) {
	return kong.New(cli,
		kong.Name("rollagent"),
		kong.Description("Rolling updates for a fleet of hosts, with no single leader that can die and stall them."),
		kong.Writers(stdout, stderr),
		kong.Exit(func(c int) { panic(exitCode(c)) }),
		kong.UsageOnError(),
		kong.Vars{"version": version, "prefix": coordinator.DefaultPrefix, "consul_addr": DefaultConsulAddr,
			"timeout": flagDuration(DefaultTimeout), "lost_after": flagDuration(coordinator.DefaultLostAfter),
			"hook_timeout": flagDuration(agent.DefaultHookTimeout), "session_ttl": flagDuration(agent.DefaultSessionTTL),
			"exec_lease_slack": flagDuration(agent.ExecLeaseSlack), "health_every": flagDuration(agent.HealthCheckInterval)},
		kong.DefaultEnvars("ROLLAGENT"),
		kong.Configuration(loadConfig),
	)
}

// flagDuration writes d as a flag's default is typed, 10m rather than
// 10m0s: the defaults are written once, as constants, and help shows them.
func flagDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// usageExit is the exit status of a command line that does not parse: 2,
// but 1 for plan, whose 2 says "changes" (terraform's -detailed-exitcode),
// so that a script never takes a typo for a plan with changes.
func usageExit(err error) int {
	var pe *kong.ParseError
	if errors.As(err, &pe) {
		return usageExitOf(pe.Context)
	}
	return 2
}

// usageExitOf is usageExit for a command line kong parsed as kctx.
func usageExitOf(kctx *kong.Context) int {
	if kctx != nil {
		if sel := kctx.Selected(); sel != nil && sel.Name == "plan" {
			return 1
		}
	}
	return 2
}

// errQuiet is returned by a command that has already told the user.
var errQuiet = errors.New("")

func newLogger(g *Globals, w io.Writer) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name: "rollagent", Level: hclog.LevelFromString(g.LogLevel), JSONFormat: g.LogJSON, Output: w,
	})
}
