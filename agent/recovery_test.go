package agent_test

import (
	"syscall"
	"testing"
	"time"

	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
)

// The holder is SIGKILLed while it verifies v2 (new container up, old set
// aside as -prev). While it is dead the operator commits v3 and cancels it;
// then every agent restarts. The victim reclaims its node's slot before it
// looks at what its step left, and under the CANCEL nothing moves: its
// healthy v2 container stays, and so does the old one set aside. Before the
// slot belonged to the node, the restarted agent restored v1 at once, with
// no slot and no fence, under the CANCEL.
func TestReturningAgentMovesNothingUnderCancel(t *testing.T) {
	f, ns, _ := deployed(t, "web", 3)
	spec := f.spec(f.image("v2", nil), 1, "pause", 1)
	spec.Update.MinHealthyTime = hashspec.Duration(15 * time.Second) // a long verification to be killed in
	f.commit(spec)
	var victim string
	f.waitFor(time.Minute, "a holder verifying with its old container set aside", func() bool {
		victim = f.midReplacement()
		if victim == "" {
			return false
		}
		for _, w := range f.workloads() {
			if w.Healthy && len(w.IDs) == 2 {
				return true
			}
		}
		return false
	})
	f.signal(victim, syscall.SIGKILL)
	v3 := f.commit(f.spec(f.image("v3", nil), 1, "pause", 1))
	f.cancel()
	before := f.containerIDs()
	for _, n := range ns {
		if n != victim {
			f.signal(n, syscall.SIGKILL)
		}
	}
	for _, n := range ns {
		f.start(n)
	}
	f.waitFor(30*time.Second, "every agent to report cancelled", func() bool {
		gs := f.state()
		ok := 0
		for _, n := range gs.Nodes {
			if n.State == coordinator.StateCancelled && n.Desired == v3 {
				ok++
			}
		}
		return ok == len(ns)
	})
	f.steady(8*time.Second, "under the CANCEL after the restarts", before)
	if f.midReplacement() != victim {
		t.Fatalf("%s's old container is no longer set aside", victim)
	}
	gs := f.state()
	if counted := gs.Holders.Counted(); len(counted) != 0 {
		t.Fatalf("slots still counted under the CANCEL with every workload healthy: %v", counted)
	}
	// A new commit resolves the interrupted step under the victim's slot
	// and rolls on.
	v4 := f.commit(f.spec(f.image("v4", nil), 1, "pause", 1))
	f.waitFor(2*time.Minute, "v4 everywhere after the cancel", func() bool { return f.converged(ns, v4) })
}
