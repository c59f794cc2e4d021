package agent_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/fleettest"
	"github.com/rollagent/rollagent/internal/testkit"
	"github.com/rollagent/rollagent/lockstep"
)

// zoneCounter counts, per zone, the nodes whose runtime is between the
// fence of a replacement and its new workload's health: the workload's own view of which
// nodes are down, kept with the peak of each zone and of the group.
type zoneCounter struct {
	mu        sync.Mutex
	now, peak map[string]int
	total     int
	peakTotal int
	over      []string // what broke a zone's bound, as it happened
}

func (z *zoneCounter) enter(zone, node string, limit int) {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.now[zone]++
	z.total++
	z.peak[zone] = max(z.peak[zone], z.now[zone])
	z.peakTotal = max(z.peakTotal, z.total)
	if z.now[zone] > limit {
		z.over = append(z.over, fmt.Sprintf("%s entered with %d of zone %s down", node, z.now[zone], zone))
	}
}

func (z *zoneCounter) leave(zone string) {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.now[zone]--
	z.total--
}

// zoneRuntime is a recording runtime that tells zoneCounter when its node
// goes down (its replacement passed the fence) and comes back (its new
// workload is healthy), and takes slow to replace it.
type zoneRuntime struct {
	*recordingRuntime
	zone, node string
	z          *zoneCounter
	slow       time.Duration
	mu         sync.Mutex
	down       bool
}

func (r *zoneRuntime) Replace(ctx context.Context, s *hashspec.Spec, sha string, step agent.StepFunc) error {
	return r.recordingRuntime.Replace(ctx, s, sha, func(ctx context.Context, name string) error {
		if err := step(ctx, name); err != nil {
			return err
		}
		r.mu.Lock()
		if !r.down {
			r.down = true
			r.z.enter(r.zone, r.node, 1)
		}
		r.mu.Unlock()
		time.Sleep(r.slow)
		return nil
	})
}

func (r *zoneRuntime) WaitHealthy(ctx context.Context, s *hashspec.Spec) error {
	err := r.recordingRuntime.WaitHealthy(ctx, s)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil && r.down {
		r.down = false
		r.z.leave(r.zone)
	}
	return err
}

// zonesWatch follows the group's holders record in Consul and keeps, for
// each state it saw, the nodes that use a slot (live holders and claims
// not lost) that share a zone, by the test's own map of nodes to zones.
type zonesWatch struct {
	mu     sync.Mutex
	shared []string
	states int
}

func watchZones(ctx context.Context, t *testing.T, c *api.Client, group string, zoneOf map[string]string) *zonesWatch {
	w := &zonesWatch{}
	followHolders(ctx, t, c, group, func(_ time.Time, h *lockstep.Holders) { w.judge(h, zoneOf) })
	return w
}

// judge records the zones that h, the holders as one read saw them (the
// record, the slot keys and the holder keys), counts two nodes in.
func (w *zonesWatch) judge(h *lockstep.Holders, zoneOf map[string]string) {
	used := map[string]bool{}
	for _, n := range h.Counted() {
		used[n] = true
	}
	byZone := map[string][]string{}
	for n, u := range used {
		if u {
			byZone[zoneOf[n]] = append(byZone[zoneOf[n]], n)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.states++
	for zone, ns := range byZone {
		if len(ns) > 1 {
			sort.Strings(ns)
			w.shared = append(w.shared, fmt.Sprintf("zone %s: %s", zone, strings.Join(ns, ", ")))
		}
	}
}

// Six nodes in three zones (the Consul node meta "zone" of the Consul
// client agent each runs on), max_parallel 2 and max_parallel_per
// { key = "zone", max = 1 }: by Consul's holders record and by the
// runtimes' own view, no zone ever has two nodes down, K = 2 is used
// across zones, and both rollouts finish. The first joins the line in the
// order a1, a2, b1, b2, c1, c2, so that without the bound a1 and a2 would
// be granted together; the second with every node joining at once.
func TestSpreadKeepsOneNodeDownPerZone(t *testing.T) {
	srv := consultest.NewDev(t)
	group := fleettest.Group("spread")
	zones := []string{"a", "b", "c"}
	nodes := []string{"a1", "a2", "b1", "b2", "c1", "c2"}
	zoneOf, stores := map[string]string{}, map[string]*coordinator.Store{}
	for _, zone := range zones {
		cl := consultest.NewZoneClient(t, srv, zone)
		for _, n := range nodes {
			if strings.HasPrefix(n, zone) {
				zoneOf[n], stores[n] = zone, coordinator.NewStore(cl.Client(), coordinator.DefaultPrefix)
			}
		}
	}
	st := coordinator.NewStore(srv.Client(), coordinator.DefaultPrefix)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watch := watchZones(ctx, t, srv.Client(), group, zoneOf)
	z := &zoneCounter{now: map[string]int{}, peak: map[string]int{}}
	converged := func(sha string) func(s *coordinator.NodeState) bool {
		return func(s *coordinator.NodeState) bool { return s.SHA == sha && s.State == coordinator.StateConverged }
	}
	v1 := commitSpread(t, st, group, "v1")
	for _, n := range nodes {
		rt := &zoneRuntime{recordingRuntime: &recordingRuntime{}, zone: zoneOf[n], node: n, z: z, slow: 500 * time.Millisecond}
		startAgent(t, stores[n], group, n, rt, agent.Allow{})
		inLineOrDone(t, srv.Client(), st, group, n, v1)
	}
	for _, n := range nodes {
		waitNode(t, st, group, n, "converged on v1", converged(v1))
	}
	v2 := commitSpread(t, st, group, "v2")
	for _, n := range nodes {
		waitNode(t, st, group, n, "converged on v2", converged(v2))
		// Its zone is in its record, for when the catalog forgets its
		// Consul node (Store.Domains).
		if r := nodeState(t, st, group, n); r.Domain != "zone="+zoneOf[n] {
			t.Errorf("%s's record: domain %q, want zone=%s", n, r.Domain, zoneOf[n])
		}
	}
	cancel()
	z.mu.Lock()
	defer z.mu.Unlock()
	watch.mu.Lock()
	defer watch.mu.Unlock()
	if len(z.over) > 0 || len(watch.shared) > 0 {
		t.Fatalf("a zone had two nodes down: by the runtimes %v; by Consul's holders record %v", z.over, watch.shared)
	}
	if z.peakTotal != 2 {
		t.Errorf("at most %d nodes were down at once, want max_parallel's 2 across zones", z.peakTotal)
	}
	t.Logf("holders record states seen: %d; peaks by zone %v", watch.states, z.peak)
}

// commitSpread commits release with max_parallel 2, one node down per zone.
func commitSpread(t *testing.T, st *coordinator.Store, group, release string) string {
	t.Helper()
	s := recordingSpec(t, group, release, "")
	s.Update.MaxParallel = hashspec.Count(2)
	s.Update.MaxParallelPer = &hashspec.Spread{Key: "zone", Max: 1}
	return commitSpec(t, st, group, release, s)
}

// inLineOrDone waits until node has a contender key in group's line, or
// has converged on sha already.
func inLineOrDone(t *testing.T, c *api.Client, st *coordinator.Store, group, node, sha string) {
	t.Helper()
	k, err := coordinator.NewKeys(coordinator.DefaultPrefix, group)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, time.Minute, node+" in line", func() bool {
		if n := nodeState(t, st, group, node); n != nil && n.SHA == sha {
			return true
		}
		h, err := lockstep.ReadHolders(c, k.Slot(), nil)
		if err != nil {
			return false
		}
		for _, name := range h.Names() {
			if name == node {
				return true
			}
		}
		return false
	})
}
