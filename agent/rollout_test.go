package agent_test

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/rollagent/rollagent/internal/fleetwatch"
	"github.com/rollagent/rollagent/internal/testkit"
	"github.com/rollagent/rollagent/internal/testkit/groupkit"
)

// deploy brings up agents on ns and converges them to a v1 release.
func deploy(t *testing.T, f *fleet, ns []string) string {
	t.Helper()
	for _, n := range ns {
		f.start(n)
	}
	sha := f.commit(f.spec(f.image("v1", nil), 3, "pause", 1))
	f.waitFor(90*time.Second, "first deploy of v1", func() bool { return f.converged(ns, sha) })
	return sha
}

// deployed is the opening the fleet tests share: a fleet for group, its
// agents on n nodes, converged to a v1 release, whose SHA it returns.
func deployed(t *testing.T, group string, n int) (*fleet, []string, string) {
	t.Helper()
	f := newFleet(t, group)
	ns := nodes(n)
	return f, ns, deploy(t, f, ns)
}

func TestRolloutConverges(t *testing.T) {
	f, ns, _ := deployed(t, "web", 3)
	mon := f.sample(ns)
	start := time.Now()
	v2 := f.commit(f.spec(f.image("v2", nil), 1, "pause", 1))
	f.waitFor(2*time.Minute, "rollout to v2", func() bool { return f.converged(ns, v2) })
	t.Logf("rollout of 3 nodes at K=1 took %s", time.Since(start).Round(100*time.Millisecond))
	mon.Require(t, fleetwatch.AtMost(1))
}

// holderName waits for some node to hold the slot and returns its name.
func (f *fleet) holderName() string {
	var name string
	f.waitFor(60*time.Second, "a slot holder", func() bool {
		h, err := groupkit.Holders(f.srv.Client(), f.keys())
		if names := groupkit.HolderNames(h); err == nil && len(names) > 0 {
			name = names[0]
			return true
		}
		return false
	})
	return name
}

// A holder killed mid-step keeps its node's slot: while its agent is dead
// no other node is granted, so that counting every node, the victim
// included, at most K are ever down. Once its agent is back it reclaims
// the slot, resolves its step, and the rollout goes on.
func TestKilledHolderRolloutCompletes(t *testing.T) {
	f, ns, _ := deployed(t, "web", 3)
	v2 := f.commit(f.spec(f.image("v2", nil), 1, "pause", 1))
	victim := f.holderName()
	mon := f.sample(ns)
	f.signal(victim, syscall.SIGKILL)
	testkit.Steady(t, 10*time.Second, testkit.Every, func() error {
		for _, n := range ns {
			if n != victim && f.holds(n) {
				return fmt.Errorf("%s was granted while the killed holder %s was down", n, victim)
			}
		}
		return nil
	})
	if counted := f.state().Holders.Counted(); len(counted) != 1 || counted[0] != victim {
		t.Fatalf("slots counted while %s is dead: %v, want its own", victim, counted)
	}
	back := time.Now()
	f.start(victim) // the node's agent comes back, as under systemd
	next := ""
	f.waitFor(time.Minute, "another node to take the slot", func() bool {
		next = f.holderName()
		return next != victim
	})
	t.Logf("slot passed from %s, back from the dead, to %s %s after its restart", victim, next, time.Since(back).Round(100*time.Millisecond))
	f.waitFor(2*time.Minute, "rollout to v2 after the kill", func() bool { return f.converged(ns, v2) })
	mon.Require(t, fleetwatch.AtMost(1))
}
