package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/dockertest"
	"github.com/rollagent/rollagent/internal/fleettest"
	"github.com/rollagent/rollagent/internal/fleetwatch"
)

// Six nodes, each a real container with Docker's healthcheck, in three
// zones (the Consul node meta "zone" of the client agent each node's
// agent talks to), max_parallel 2 and max_parallel_per { key = "zone",
// max = 1 }: by Docker's own state, sampled with every node counted, no
// zone ever has two nodes down and the group never more than two, two are
// down at once (K is used across zones), and the rollout finishes with
// every node healthy on the new SHA. The agents are stopped for the
// commit and come back in the order a1, a2, b1, b2, c1, c2, each in line
// before the next starts, so that without the bound a1 and a2 would be
// granted together.
func TestSpreadDockerKeepsOneNodeDownPerZone(t *testing.T) {
	srv := consultest.NewDev(t)
	f := newInProcFleetOn(t, "spread", srv, dockertest.Client(t))
	ns := []string{"a1", "a2", "b1", "b2", "c1", "c2"}
	zoneOf, stores := map[string]string{}, map[string]*coordinator.Store{}
	for _, zone := range []string{"a", "b", "c"} {
		cl := consultest.NewZoneClient(t, srv, zone)
		for _, n := range ns {
			if n[:1] == zone {
				zoneOf[n], stores[n] = "zone="+zone, coordinator.NewStore(cl.Client(), "")
			}
		}
	}
	agents := map[string]*inProcAgent{}
	for _, n := range ns {
		agents[n] = startDockerAgent(t, f, stores[n], n)
	}
	v1 := f.commit(spreadDockerSpec(t, f, "v1"))
	f.waitFor(2*time.Minute, "first deploy of v1", func() bool { return f.converged(ns, v1) })
	for _, n := range ns {
		agents[n].stop(t)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	holders := watchZones(ctx, t, srv.Client(), f.group, zoneOf)
	mon := f.watch(ns, fleetwatch.Options{Domains: map[string]map[string]string{f.group: zoneOf},
		State: func(ctx context.Context, g string) (*coordinator.GroupState, error) { return f.store.Read(ctx, g, nil) }})
	start := time.Now()
	v2 := f.commit(spreadDockerSpec(t, f, "v2"))
	for _, n := range ns {
		startDockerAgent(t, f, stores[n], n)
		inLineOrDone(t, srv.Client(), f.store, f.group, n, v2)
	}
	f.waitFor(3*time.Minute, "rollout to v2", func() bool { return f.converged(ns, v2) })
	t.Logf("rollout of 6 nodes in 3 zones at K=2, one per zone, took %s", time.Since(start).Round(100*time.Millisecond))
	cancel()
	b := fleetwatch.AtMost(2).PerDomain(1)
	b.MinSamples = 10
	mon.Require(t, b)
	if tl := mon.Tally(f.group); tl.MaxDown != 2 {
		t.Errorf("at most %d nodes were down at once, want max_parallel's 2 across zones", tl.MaxDown)
	}
	holders.mu.Lock()
	defer holders.mu.Unlock()
	if len(holders.shared) > 0 {
		t.Errorf("Consul's holders record had two nodes of a zone using a slot: %v", holders.shared)
	}
}

// spreadDockerSpec is a demoapp release at max_parallel 2, one node down
// per zone. Six containers probed every 500ms on a loaded machine: a
// probe gets 5s, so that a slow exec does not fail a good release.
func spreadDockerSpec(t *testing.T, f *fleet, release string) *hashspec.Spec {
	t.Helper()
	s := fleettest.Spec(t, fleettest.SpecOptions{Group: f.group, Image: f.image(release, nil), MaxParallel: 2,
		FailureAction: "pause", MaxFailures: 1, HealthyDeadline: time.Minute, ProbeTimeout: 5 * time.Second})
	s.Update.MaxParallelPer = &hashspec.Spread{Key: "zone", Max: 1}
	return s
}
