package agent_test

import (
	"context"
	"reflect"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/fleetwatch"
)

func (f *fleet) cancel() {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := f.store.Cancel(ctx, f.group, "", "test", "test"); err != nil {
		f.t.Fatal(err)
	}
}

// containerIDs is every managed container ID, sorted: if it does not change,
// nothing was replaced.
func (f *fleet) containerIDs() []string {
	var ids []string
	for _, w := range f.workloads() {
		ids = append(ids, w.IDs...)
	}
	sort.Strings(ids)
	return ids
}

func TestCancelIsDurableAcrossAgentRestarts(t *testing.T) {
	f, ns, _ := deployed(t, "web", 3)
	f.commit(f.spec(f.image("v2", nil), 1, "pause", 1))
	f.holderName() // the rollout has started
	f.cancel()
	// The holder may finish the step it fenced before the cancel, leaving
	// its old container set aside (its drop is fenced by the gate). A step
	// the CANCEL cut off between two calls (old container set aside, new
	// one not started) leaves its node down, keeping its slot: under a
	// closed gate nothing destructive runs, an undo included (README).
	// After that, nothing may move.
	f.waitFor(30*time.Second, "the holder's step to end", func() bool {
		gs := f.state()
		ws := f.workloads()
		for _, n := range gs.Nodes {
			claimed := false
			if gs.Holders != nil {
				_, claimed = gs.Holders.ClaimOf(n.Node)
			}
			w := ws[n.Node]
			switch {
			case len(w.IDs) > 2:
				return false
			case w.Healthy && !claimed:
			case !w.Healthy && claimed && n.State == coordinator.StateCancelled:
			default:
				return false
			}
		}
		return len(gs.Nodes) == len(ns)
	})
	before := f.containerIDs()
	for _, n := range ns {
		f.signal(n, syscall.SIGKILL)
		f.start(n)
	}
	f.waitFor(30*time.Second, "every agent to report cancelled or converged", func() bool {
		gs := f.state()
		ok := 0
		for _, n := range gs.Nodes {
			if n.State == coordinator.StateCancelled || n.State == coordinator.StateConverged {
				ok++
			}
		}
		return ok == len(ns)
	})
	f.steady(8*time.Second, "after the cancel", before)
	v3 := f.commit(f.spec(f.image("v3", nil), 2, "pause", 1))
	f.waitFor(2*time.Minute, "a new commit to roll after the cancel", func() bool { return f.converged(ns, v3) })
}

func TestBadReleasePausesAfterMaxFailures(t *testing.T) {
	f, ns, v1 := deployed(t, "web", 3)
	before := f.containerIDs()
	mon := f.sample(ns)
	bad := f.commit(f.spec(f.image("bad", map[string]string{"DEMOAPP_UNHEALTHY": "1"}), 1, "pause", 1))
	f.waitFor(90*time.Second, "the pause", func() bool {
		gs := f.state()
		return gs.Pause != nil && gs.Desired.SHA == bad && len(gs.Holders.Holding) == 0
	})
	f.waitFor(30*time.Second, "every node back on v1", func() bool { return f.running(ns, v1) })
	after := f.containerIDs()
	moved := 0
	for _, id := range after {
		if !slices.Contains(before, id) {
			moved++
		}
	}
	if moved != 0 {
		// The failed node restores its own old container, so even it keeps
		// its ID: nothing but the one attempt touched the fleet.
		t.Fatalf("%d containers are not the ones from before the bad release", moved)
	}
	mon.Require(t, fleetwatch.AtMost(1))
	if gs := f.state(); len(gs.Failures) != 1 {
		t.Fatalf("%d failures recorded, want exactly 1 (max_failures=1)", len(gs.Failures))
	}
}

func TestBadReleaseRollsBack(t *testing.T) {
	f, ns, v1 := deployed(t, "web", 3)
	mon := f.sample(ns)
	f.commit(f.spec(f.image("bad", map[string]string{"DEMOAPP_UNHEALTHY": "1"}), 1, "rollback", 1))
	f.waitFor(90*time.Second, "the rollback to v1", func() bool {
		gs := f.state()
		return gs.Desired.SHA == v1 && f.converged(ns, v1)
	})
	mon.Require(t, fleetwatch.AtMost(1))
}

// No registry can be reached here, so an image that is not present cannot
// be pulled: the pull error is reported and every node stays as it was.
func TestMissingImageLeavesNodesAsTheyWere(t *testing.T) {
	f, ns, v1 := deployed(t, "web", 2)
	before := f.containerIDs()
	f.commit(f.spec("rollagent-test/not-built:v9", 1, "pause", 1))
	f.waitFor(60*time.Second, "every node to report the pull error", func() bool {
		failed := 0
		for _, n := range f.state().Nodes {
			if n.State == coordinator.StateFailed && strings.Contains(n.Error, "rollagent-test/not-built:v9") {
				failed++
			}
		}
		return failed == len(ns)
	})
	if !f.running(ns, v1) || !reflect.DeepEqual(f.containerIDs(), before) {
		t.Fatal("a node's container changed although its new image could not be had")
	}
	if gs := f.state(); gs.Holders != nil && len(gs.Holders.Holding) != 0 {
		t.Fatal("a node took a slot for an image it does not have")
	}
}
