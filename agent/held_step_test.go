package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/testkit"
	"github.com/rollagent/rollagent/internal/testkit/groupkit"
)

// heldStep is a node left mid-step (v1 running, v0 set aside) in a group
// whose desired v2 blocks on a check on the node's Consul agent, passing
// for now: the node wins its slot in line, verifies v1, drops v0 and then
// prepares v2 under its slot.
type heldStep struct {
	g      *groupkit.Group
	v1     string
	rt     *asideRuntime
	failed func() // turns the check critical
}

func newHeldStep(t *testing.T, name string) *heldStep {
	t.Helper()
	g := groupkit.New(t, name)
	c, check := g.Srv.Client(), name+"-gate"
	registerTTLCheck(t, c, check, api.HealthPassing)
	v0 := commitRecording(t, g.Store, g.Name, "v0", "")
	v1 := commitRecording(t, g.Store, g.Name, "v1", "")
	commitBlockedTo(t, g.Store, g.Name, "v2", nil, []hashspec.Block{{Check: check}})
	failed := func() {
		setTTL(t, c, check, api.HealthCritical)
		// The agent reads the servers' view, which the local agent's sync
		// reaches a moment later: the hook returns once it has.
		q := &api.QueryOptions{RequireConsistent: true, Filter: fmt.Sprintf("CheckID == %q", check)}
		testkit.Eventually(t, 10*time.Second, "the servers to see the check critical", func() bool {
			hs, _, err := c.Health().State(api.HealthAny, q)
			return err == nil && len(hs) == 1 && hs[0].Status == api.HealthCritical
		})
	}
	return &heldStep{g: g, v1: v1, rt: &asideRuntime{sha: v1, aside: v0, healthy: true}, failed: failed}
}

// records follows node's record from now until the test ends, and returns
// every version seen so far.
func (h *heldStep) records(t *testing.T, node string) func() []coordinator.NodeState {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var mu sync.Mutex
	var seen []coordinator.NodeState
	followPrefix(ctx, h.g.Client, h.g.Keys.Node(node), func(_ time.Time, ps api.KVPairs) {
		for _, p := range ps {
			var n coordinator.NodeState
			if p.Key == h.g.Keys.Node(node) && json.Unmarshal(p.Value, &n) == nil {
				mu.Lock()
				seen = append(seen, n)
				mu.Unlock()
			}
		}
	})
	return func() []coordinator.NodeState {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

// A hold that Consul cannot check in a fence (a check's health, the
// clock's window) is judged again right before the first step on a
// healthy workload. The check fails while the node verifies v1: going on
// to v2 would be a new replacement begun under the hold, so it gives its
// slot back instead, on v1, healthy, and its record says which gate holds
// it and since when. Before, it went on and replaced v1.
func TestHoldBeforeTheFirstStepGivesTheSlotBack(t *testing.T) {
	h := newHeldStep(t, "heldstep")
	st, group, rt := h.g.Store, h.g.Name, h.rt
	rt.verified = func(string) { h.failed() }
	records := h.records(t, "n1")
	startAgent(t, st, group, "n1", rt, agent.Allow{})
	h.g.WaitFor(time.Minute, "n1 to give its slot back after dropping v0, or to replace v1", func() bool {
		calls := rt.destructiveCalls()
		return slices.Contains(calls, "Finish") && !counted(t, st, group, "n1") || slices.Contains(calls, "Replace")
	})
	if calls := rt.destructiveCalls(); !slices.Equal(calls, []string{"Finish"}) {
		t.Fatalf("the agent called %v: with the check failed, only the verified step's drop may run", calls)
	}
	if sha, aside := rt.state(); sha != h.v1 || aside != "" {
		t.Fatalf("node runs %.12s with %.12q set aside, want v1 alone", sha, aside)
	}
	// The record the release wrote, not only the next look's.
	var released *coordinator.NodeState
	h.g.WaitFor(10*time.Second, "the release's record", func() bool {
		for _, n := range records() {
			if strings.HasSuffix(n.Error, "nothing was touched, and the node gave its slot back") {
				released = &n
				return true
			}
		}
		return false
	})
	if n := released; n.State != coordinator.StateWaiting || n.Gate != coordinator.GateBlockedByCheck || len(n.Blocked) == 0 {
		t.Fatalf("n1's released record %+v: want waiting, held by %s, with the check it is blocked by", n, coordinator.GateBlockedByCheck)
	}
}

// A workload that went down after its verification, while the node
// prepared v2, is replaced even though the check failed meanwhile: a hold
// lets a holder heal its node, and giving the slot back would leave it
// down, counted against K, until the check passes.
func TestHoldBeforeTheFirstStepLetsADownNodeBeReplaced(t *testing.T) {
	h := newHeldStep(t, "heldown")
	st, group, rt := h.g.Store, h.g.Name, h.rt
	rt.prepared = func(string) {
		h.failed()
		rt.mu.Lock()
		rt.healthy = false
		rt.mu.Unlock()
	}
	startAgent(t, st, group, "n1", rt, agent.Allow{})
	h.g.WaitFor(time.Minute, "n1 to replace its failing workload, or to give its slot back", func() bool {
		calls := rt.destructiveCalls()
		return slices.Contains(calls, "Replace") || slices.Contains(calls, "Finish") && !counted(t, st, group, "n1")
	})
	if calls := rt.destructiveCalls(); !slices.Contains(calls, "Replace") {
		t.Fatalf("the agent called %v: a node that failed after its verification must be replaced", calls)
	}
}
