package agent_test

import (
	"testing"
	"time"

	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/fleetwatch"
)

// anySampler watches, every 100ms, how many nodes have no healthy
// container at all, under either name (start-first sets the old one aside
// under <name>-prev and keeps it running), and how often a node had two
// running at once.
type anySampler struct {
	mon      *fleetwatch.Monitor
	nodes    []string
	overlaps int // node-samples with two running containers; the monitor's goroutine counts them
}

func (f *fleet) sampleAny(nodes []string) *anySampler {
	s := &anySampler{nodes: nodes}
	s.mon = f.watch(nodes, fleetwatch.Options{Down: fleetwatch.Unserved, Observe: s.observe, ProbeTimeout: 5 * time.Second})
	return s
}

func (s *anySampler) observe(sm *fleetwatch.Sample) {
	for _, n := range s.nodes {
		if w, ok := sm.Workloads[n]; ok && len(w.Running) > 1 {
			s.overlaps++
		}
	}
}

// finish stops the test unless no node was ever without a healthy
// container, over at least 10 samples, and some sample saw a node run its
// old and new containers at once.
func (s *anySampler) finish(t *testing.T) {
	t.Helper()
	ok := s.mon.Finish(t, fleetwatch.Bounds{Down: 0, Holding: fleetwatch.Unbounded, Busy: fleetwatch.Unbounded, MinSamples: 10})
	t.Logf("start-first monitor: %d node-samples with old and new both running", s.overlaps)
	if s.overlaps == 0 {
		t.Error("no sample saw a node run its old and new containers at once: was it start-first?")
		ok = false
	}
	if !ok {
		t.FailNow()
	}
}

// With order = "start-first" the old container serves until the new one is
// healthy, so no node is ever without a healthy container, even at
// max_parallel=2; afterwards each node runs exactly one, and the Consul
// service shows the new SHA.
func TestStartFirstKeepsTheOldContainerUp(t *testing.T) {
	f, ns, _ := deployed(t, "web", 3)
	spec := f.spec(f.image("v2", nil), 2, "pause", 1)
	spec.Update.Order = hashspec.OrderStartFirst
	mon := f.sampleAny(ns)
	start := time.Now()
	v2 := f.commit(spec)
	f.waitFor(2*time.Minute, "start-first rollout to v2", func() bool { return f.converged(ns, v2) })
	t.Logf("start-first rollout of 3 nodes at K=2 took %s", time.Since(start).Round(100*time.Millisecond))
	mon.finish(t)
	for n, w := range f.workloads() {
		if len(w.IDs) != 1 {
			t.Errorf("node %s has %d containers after the rollout, want 1", n, len(w.IDs))
		}
	}
	checkService(t, f, ns, v2)
}
