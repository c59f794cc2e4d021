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
	"github.com/rollagent/rollagent/internal/testkit/groupkit"
	"github.com/rollagent/rollagent/lockstep"
)

// asideRuntime is a Runtime whose workload is a SHA in memory with, as a
// Docker replacement leaves it, the old one set aside until Finish drops
// it or Restore brings it back. It records every destructive call.
type asideRuntime struct {
	mu      sync.Mutex
	sha     string
	aside   string // the set-aside SHA, "" for none
	healthy bool
	calls   []string
	// verified, when set, runs once as WaitHealthy begins for sha.
	verified func(sha string)
	// prepared, when set, runs once as Prepare begins for sha.
	prepared func(sha string)
}

func (r *asideRuntime) note(call string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, call)
}

// destructiveCalls are the calls so far that changed the workload.
func (r *asideRuntime) destructiveCalls() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, c := range r.calls {
		if slices.Contains(destructive, c) {
			out = append(out, c)
		}
	}
	return out
}

func (r *asideRuntime) state() (sha, aside string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sha, r.aside
}

func (r *asideRuntime) Inspect(context.Context) (agent.Observed, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return agent.Observed{SHA: r.sha, Leftover: r.aside != ""}, nil
}

func (r *asideRuntime) Prepare(_ context.Context, _ *hashspec.Spec, sha string) error {
	r.mu.Lock()
	hook := r.prepared
	r.prepared = nil
	r.mu.Unlock()
	if hook != nil {
		hook(sha)
	}
	return nil
}

func (r *asideRuntime) Replace(ctx context.Context, _ *hashspec.Spec, sha string, step agent.StepFunc) error {
	r.note("Replace")
	if err := step(ctx, "swap"); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sha, r.aside = sha, r.sha
	return nil
}

func (r *asideRuntime) WaitHealthy(context.Context, *hashspec.Spec) error {
	r.mu.Lock()
	hook, sha := r.verified, r.sha
	r.verified = nil
	r.mu.Unlock()
	if hook != nil {
		hook(sha)
	}
	if ok, why := r.Healthy(context.Background()); !ok {
		return &unhealthyError{why}
	}
	return nil
}

type unhealthyError struct{ why string }

func (e *unhealthyError) Error() string { return e.why }

func (r *asideRuntime) Finish(context.Context) error {
	r.note("Finish")
	r.mu.Lock()
	defer r.mu.Unlock()
	r.aside = ""
	return nil
}

func (r *asideRuntime) Restore(_ context.Context, sha string) error {
	r.note("Restore")
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sha == sha && r.aside != "" {
		r.sha, r.aside, r.healthy = r.aside, "", true
	}
	return nil
}

func (r *asideRuntime) Healthy(context.Context) (bool, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.healthy, "test: health set by the test"
}

// putClaim writes node's claim on group's slot, as a grant leaves it for a
// holder whose process died mid-step: its session gone, its lease running.
func putClaim(t *testing.T, c *api.Client, k coordinator.Keys, node, note string) {
	t.Helper()
	now := time.Now().UTC()
	rec := map[string]any{"holders": map[string]any{}, "claims": map[string]lockstep.Claim{
		node: {Session: "00000000-0000-4000-8000-000000000001", Since: now, Until: now.Add(10 * time.Minute), Note: note}}}
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.KV().Put(&api.KVPair{Key: lockstep.HoldersKey(k.Slot()), Value: b}, nil); err != nil {
		t.Fatal(err)
	}
}

// counted says whether node's claim counts against max_parallel now, as
// Consul's record of the slot has it.
func counted(t *testing.T, st *coordinator.Store, group, node string) bool {
	t.Helper()
	gs, err := st.Read(context.Background(), group, nil)
	if err != nil {
		t.Fatal(err)
	}
	return gs.Holders != nil && slices.Contains(gs.Holders.Counted(), node)
}

// Issue 25 item 9: a holder killed mid-step under a CANCEL, its new
// workload down and the old one set aside. Its restarted agent reclaims
// the node's slot and, the gate closed, undoes nothing: the node stays as
// the step left it and keeps its slot, so that it still counts, and its
// record says a new commit is how it recovers. On 6d7f554 it restored the
// old workload behind Hold.Check, a check that skips the gate.
func TestCancelledDownNodeKeepsItsSlotAndUndoesNothing(t *testing.T) {
	g := groupkit.New(t, "closeddown")
	srv, st, group, k := g.Srv, g.Store, g.Name, g.Keys
	v1 := commitRecording(t, st, group, "v1", "")
	v2 := commitRecording(t, st, group, "v2", "")
	if _, err := st.Cancel(context.Background(), group, v2, "test", "test"); err != nil {
		t.Fatal(err)
	}
	putClaim(t, srv.Client(), k, "n1", v2)
	rt := &asideRuntime{sha: v2, aside: v1}
	startAgent(t, st, group, "n1", rt, agent.Allow{})
	g.WaitFor(time.Minute, "n1 to keep its slot, or to act", func() bool {
		n := nodeState(t, st, group, "n1")
		kept := n != nil && n.State == coordinator.StateCancelled && strings.Contains(n.Error, "keeps its slot")
		return kept || len(rt.destructiveCalls()) > 0
	})
	// A bounded watch: the reclaim is done, and nothing may move after it.
	g.Steady(2*time.Second, 100*time.Millisecond, func() error {
		if calls := rt.destructiveCalls(); len(calls) > 0 {
			return fmt.Errorf("under the CANCEL the agent called %v on its node", calls)
		}
		return nil
	})
	if sha, aside := rt.state(); sha != v2 || aside != v1 {
		t.Fatalf("node runs %.12s with %.12q set aside, want the step as it was left", sha, aside)
	}
	if !counted(t, st, group, "n1") {
		t.Fatal("n1 is down under the CANCEL and its claim no longer counts against max_parallel")
	}
	if n := nodeState(t, st, group, "n1"); !strings.Contains(n.Error, "new commit") {
		t.Fatalf("n1's record says %q: it must say a new commit recovers it", n.Error)
	}
}

// Issue 25 item 9: a CANCEL that lands while the holder verifies its new
// workload. The old workload set aside is not dropped: the drop is fenced
// by the gate, which is closed, so the node stays on its healthy new
// workload with the old one set aside and gives its slot back. On 6d7f554
// finish dropped it behind Hold.Check, which skips the gate.
func TestCancelDuringVerificationDropsNothing(t *testing.T) {
	g := groupkit.New(t, "closedfinish")
	st, group := g.Store, g.Name
	v1 := commitRecording(t, st, group, "v1", "")
	rt := &asideRuntime{sha: v1, healthy: true}
	startAgent(t, st, group, "n1", rt, agent.Allow{})
	waitNode(t, st, group, "n1", "converged on v1", converged(v1))
	rt.mu.Lock()
	rt.verified = func(string) {
		if _, err := st.Cancel(context.Background(), group, "", "test", "test"); err != nil {
			t.Error(err)
		}
	}
	rt.mu.Unlock()
	v2 := commitRecording(t, st, group, "v2", "")
	g.WaitFor(time.Minute, "n1 to report the CANCEL with its slot given back, or to drop v1", func() bool {
		n := nodeState(t, st, group, "n1")
		done := n != nil && n.State == coordinator.StateCancelled && !counted(t, st, group, "n1")
		return done || slices.Contains(rt.destructiveCalls(), "Finish")
	})
	if calls := rt.destructiveCalls(); !slices.Equal(calls, []string{"Replace"}) {
		t.Fatalf("the agent called %v: after the CANCEL nothing may be dropped", calls)
	}
	if sha, aside := rt.state(); sha != v2 || aside != v1 {
		t.Fatalf("node runs %.12s with %.12q set aside, want v2 with v1 still set aside", sha, aside)
	}
}

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
		g.WaitFor(10*time.Second, "the servers to see the check critical", func() bool {
			hs, _, err := c.Health().State(api.HealthAny, q)
			return err == nil && len(hs) == 1 && hs[0].Status == api.HealthCritical
		})
	}
	return &heldStep{g: g, v1: v1, rt: &asideRuntime{sha: v1, aside: v0, healthy: true}, failed: failed}
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
	records := followNode(t, h.g.Client, h.g.Keys, "n1")
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
