package agent_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/fleettest"
)

// A running agent refuses a committed spec that asks for more than its host
// allows: its node fails with the flag to pass, nothing is replaced, and no
// failure is counted against the rollout. The same agent started with that
// flag rolls the spec out.
func TestAgentRefusesPrivilegedSpecsWithoutTheFlag(t *testing.T) {
	srv := consultest.NewDev(t)
	st := coordinator.NewStore(srv.Client(), "")
	tests := []struct {
		name, extra, flag string
		allow             agent.Allow
	}{
		{"privileged", `,"privileged":true`, "--allow-privileged", agent.Allow{Privileged: true}},
		{"host network", `,"network_mode":"host"`, "--allow-host-network", agent.Allow{HostNetwork: true}},
		{"host pid", `,"pid_mode":"host"`, "--allow-host-pid", agent.Allow{HostPID: true}},
		{"bind outside the allow-list", `,"volumes":[{"type":"bind","source":"/etc","target":"/data"}]`,
			"outside --allow-bind", agent.Allow{BindPrefixes: []string{"/etc"}}},
		{"another group's volume", `,"volumes":[{"type":"volume","source":"db-data","target":"/data"}]`,
			"--allow-volume db-data", agent.Allow{Volumes: []string{"db-*"}}},
		{"another group's network", `,"network_mode":"db-internal"`,
			"--allow-network db-internal", agent.Allow{Networks: []string{"db-*"}}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			group := fleettest.Group(fmt.Sprintf("allow%d", i))
			sha := commitRecording(t, st, group, "v1", tc.extra)
			rt := &recordingRuntime{}
			// Allowing the other things is not enough: only the matching flag is.
			a := startAgent(t, st, group, "n1", rt, allBut(tc.allow))
			waitNode(t, st, group, "n1", "failed", func(n *coordinator.NodeState) bool {
				return n.State == coordinator.StateFailed && strings.Contains(n.Error, tc.flag)
			})
			a.stop(t)
			calls := rt.Calls()
			noDestructiveCalls(t, calls)
			if strings.Contains(strings.Join(calls, " "), "Prepare") {
				t.Fatalf("the agent prepared a refused spec: %v", calls)
			}
			noFailureCounted(t, st, group, "a refusal")
			startAgent(t, st, group, "n1", rt, tc.allow)
			waitNode(t, st, group, "n1", "converged with "+tc.flag, func(n *coordinator.NodeState) bool {
				return n.State == coordinator.StateConverged && n.SHA == sha
			})
		})
	}
}

// allBut allows everything a spec can ask for except what want allows.
func allBut(want agent.Allow) agent.Allow {
	all := agent.Allow{Privileged: !want.Privileged, HostNetwork: !want.HostNetwork, HostPID: !want.HostPID,
		BindPrefixes: []string{"/"}, Volumes: []string{"*"}, Networks: []string{"*"}}
	if len(want.BindPrefixes) > 0 {
		all.BindPrefixes = []string{"/srv", "/var/lib/app"}
	}
	// Patterns for other groups' names only: the one the spec uses is not.
	if len(want.Volumes) > 0 {
		all.Volumes = []string{"web-*"}
	}
	if len(want.Networks) > 0 {
		all.Networks = []string{"web-*"}
	}
	return all
}
