package agent_test

import (
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/lockstep"
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

func TestRolloutConverges(t *testing.T) {
	f := newFleet(t, "web")
	ns := nodes(3)
	deploy(t, f, ns)
	mon := f.sample(ns)
	start := time.Now()
	v2 := f.commit(f.spec(f.image("v2", nil), 1, "pause", 1))
	f.waitFor(2*time.Minute, "rollout to v2", func() bool { return f.converged(ns, v2) })
	t.Logf("rollout of 3 nodes at K=1 took %s", time.Since(start).Round(100*time.Millisecond))
	mon.finish(t, 1)
}

// holderName waits for some node to hold the slot and returns its name.
func (f *fleet) holderName() string {
	var name string
	f.waitFor(60*time.Second, "a slot holder", func() bool {
		h, err := lockstep.ReadHolders(f.srv.Client(), "rollagent/groups/"+f.group+"/slot/", &api.QueryOptions{})
		if err != nil {
			return false
		}
		for _, e := range h.Holding {
			name = e.Name
			return true
		}
		return false
	})
	return name
}

// A holder killed mid-step leaves its own node down until its agent is back
// (its containers live on without it), and the slot is reclaimed at once by
// design, so the guarantee checked here is that the other nodes never have
// more than K down, and that the victim's node recovers and converges.
func TestKilledHolderRolloutCompletes(t *testing.T) {
	f := newFleet(t, "web")
	ns := nodes(3)
	deploy(t, f, ns)
	v2 := f.commit(f.spec(f.image("v2", nil), 1, "pause", 1))
	victim := f.holderName()
	var others []string
	for _, n := range ns {
		if n != victim {
			others = append(others, n)
		}
	}
	mon := f.sample(others)
	killed := time.Now()
	f.signal(victim, syscall.SIGKILL)
	next := ""
	f.waitFor(30*time.Second, "another node to take the slot", func() bool {
		next = f.holderName()
		return next != victim
	})
	t.Logf("slot passed from killed %s to %s in %s", victim, next, time.Since(killed).Round(100*time.Millisecond))
	f.start(victim) // the node's agent comes back, as under systemd
	f.waitFor(2*time.Minute, "rollout to v2 after the kill", func() bool { return f.converged(ns, v2) })
	mon.finish(t, 1)
}
