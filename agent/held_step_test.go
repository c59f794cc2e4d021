package agent_test

import (
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/testkit/groupkit"
)

// A hold that Consul cannot check in a fence (a check's health, the
// clock's window) is judged again right before the first step on a
// healthy workload. A node left mid-step (v1 running, v0 set aside) wins
// its slot in line, verifies v1 and drops v0; the check it blocks on fails
// meanwhile. Going on to v2 would be a new replacement begun under the
// hold: it gives its slot back instead, on v1, healthy. Before, it went on
// and replaced v1.
func TestHoldBeforeTheFirstStepGivesTheSlotBack(t *testing.T) {
	g := groupkit.New(t, "heldstep")
	st, group, c := g.Store, g.Name, g.Srv.Client()
	registerTTLCheck(t, c, "heldstep-gate", api.HealthPassing)
	v0 := commitRecording(t, st, group, "v0", "")
	v1 := commitRecording(t, st, group, "v1", "")
	commitBlockedTo(t, st, group, "v2", nil, []hashspec.Block{{Check: "heldstep-gate"}})
	rt := &asideRuntime{sha: v1, aside: v0, healthy: true}
	rt.verified = func(string) { setTTL(t, c, "heldstep-gate", api.HealthCritical) }
	startAgent(t, st, group, "n1", rt, agent.Allow{})
	g.WaitFor(time.Minute, "n1 to give its slot back after dropping v0, or to replace v1", func() bool {
		calls := rt.destructiveCalls()
		return slices.Contains(calls, "Finish") && !counted(t, st, group, "n1") || slices.Contains(calls, "Replace")
	})
	if calls := rt.destructiveCalls(); !slices.Equal(calls, []string{"Finish"}) {
		t.Fatalf("the agent called %v: with the check failed, only the verified step's drop may run", calls)
	}
	if sha, aside := rt.state(); sha != v1 || aside != "" {
		t.Fatalf("node runs %.12s with %.12q set aside, want v1 alone", sha, aside)
	}
}
