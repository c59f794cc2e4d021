package agent_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/dockertest"
)

// anySampler checks, every 100ms until stopped, how many nodes have no
// healthy container at all, under either name (start-first sets the old
// one aside under <name>-prev and keeps it running), and how often a node
// had two running at once.
type anySampler struct {
	samples, maxDown, errors int
	overlaps                 int // node-samples with two running containers
	stop, done               chan struct{}
}

func (f *fleet) sampleAny(nodes []string) *anySampler {
	s := &anySampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			s.observe(f, nodes)
			select {
			case <-s.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return s
}

func (s *anySampler) observe(f *fleet, nodes []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	args := filters.NewArgs(filters.Arg("label", agent.LabelGroup+"="+f.group), filters.Arg("label", dockertest.Label+"="+dockertest.RunID()))
	list, err := f.docker.ContainerList(ctx, container.ListOptions{All: true, Filters: args})
	if err != nil {
		s.errors++
		return
	}
	healthy, running := map[string]bool{}, map[string]int{}
	for _, c := range list {
		n := c.Labels[agent.LabelNode]
		if c.State == "running" {
			running[n]++
			healthy[n] = healthy[n] || strings.Contains(c.Status, "(healthy)")
		}
	}
	down := 0
	for _, n := range nodes {
		if !healthy[n] {
			down++
		}
		if running[n] > 1 {
			s.overlaps++
		}
	}
	s.samples++
	s.maxDown = max(s.maxDown, down)
}

func (s *anySampler) finish(t *testing.T) {
	t.Helper()
	close(s.stop)
	<-s.done
	t.Logf("start-first monitor: %d samples (%d failed), at most %d nodes without a healthy container, %d node-samples with old and new both running",
		s.samples, s.errors, s.maxDown, s.overlaps)
	switch {
	case s.samples < 10:
		t.Fatalf("only %d samples", s.samples)
	case s.maxDown > 0:
		t.Fatalf("%d nodes had no healthy container at once; start-first must keep the old one serving", s.maxDown)
	case s.overlaps == 0:
		t.Fatal("no sample saw a node run its old and new containers at once: was it start-first?")
	}
}

// With order = "start-first" the old container serves until the new one is
// healthy, so no node is ever without a healthy container, even at
// max_parallel=2; afterwards each node runs exactly one, and the Consul
// service shows the new SHA.
func TestStartFirstKeepsTheOldContainerUp(t *testing.T) {
	f := newFleet(t, "web")
	ns := nodes(3)
	deploy(t, f, ns)
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
