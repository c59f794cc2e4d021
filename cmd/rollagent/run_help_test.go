package main

import (
	"io"
	"strings"
	"testing"

	"github.com/rollagent/rollagent/agent"
)

// The run command's help states the exec lease and the check interval
// from agent's constants, through kong's vars, not from literals.
func TestRunHelpDerivesItsValues(t *testing.T) {
	var cli CLI
	parser, err := newParser(&cli, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	help := map[string]string{}
	for _, n := range parser.Model.Children {
		if n.Name == "run" {
			for _, f := range n.Flags {
				help[f.Name] = f.Help
			}
		}
	}
	every := flagDuration(agent.HealthCheckInterval)
	for flag, want := range map[string]string{
		"hook-timeout": "for this + 2 x healthy_deadline + " + flagDuration(agent.ExecLeaseSlack) + ".",
		"health-addr":  "check it there every " + every + ", instead of passing a TTL check every " + every + ";",
	} {
		if !strings.Contains(help[flag], want) {
			t.Errorf("--%s help %q, want it to say %q", flag, help[flag], want)
		}
	}
}
