package main

import (
	"encoding/json"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
)

// groupPairs builds the KV pairs of group web with testdata/web.json
// committed at `at`, plus extra records: what coordinator.Parse reads.
type groupPairs struct {
	t     *testing.T
	k     coordinator.Keys
	sha   string
	at    time.Time
	pairs api.KVPairs
	// health is what Store.Read would read of the checks the spec blocks
	// on (GroupState.Health).
	health *coordinator.GateHealth
	// released is when Store.Read would have first seen the latest release.
	released coordinator.ReleaseSeen
	// after and last are what Store.Read would read for update.after and
	// update.last.
	after []coordinator.GroupProgress
	last  *coordinator.LastState
}

func newGroupPairs(t *testing.T, at time.Time) *groupPairs {
	t.Helper()
	b, err := os.ReadFile("testdata/web.json")
	if err != nil {
		t.Fatal(err)
	}
	spec, sha, err := hashspec.Load(b, hashspec.FormatJSON, "web.json")
	if err != nil {
		t.Fatal(err)
	}
	canon, err := spec.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	k, err := coordinator.NewKeys(coordinator.DefaultPrefix, "web")
	if err != nil {
		t.Fatal(err)
	}
	g := &groupPairs{t: t, k: k, sha: sha, at: at}
	g.put(k.History(sha), coordinator.HistoryEntry{SHA: sha, Spec: canon, CommittedAt: at})
	return g
}

// respec commits, in place of web.json, web.json changed by mut.
func (g *groupPairs) respec(mut func(s *hashspec.Spec)) *groupPairs {
	b, err := os.ReadFile("testdata/web.json")
	if err != nil {
		g.t.Fatal(err)
	}
	spec, err := hashspec.Parse(b, hashspec.FormatJSON, "web.json")
	if err != nil {
		g.t.Fatal(err)
	}
	mut(spec)
	g.sha, err = spec.SHA()
	if err != nil {
		g.t.Fatal(err)
	}
	canon, err := spec.Canonical()
	if err != nil {
		g.t.Fatal(err)
	}
	g.pairs = nil
	return g.put(g.k.History(g.sha), coordinator.HistoryEntry{SHA: g.sha, Spec: canon, CommittedAt: g.at})
}

func (g *groupPairs) put(key string, v any) *groupPairs {
	b, err := json.Marshal(v)
	if err != nil {
		g.t.Fatal(err)
	}
	g.pairs = append(g.pairs, &api.KVPair{Key: key, Value: b})
	return g
}

func (g *groupPairs) desired() *groupPairs {
	return g.put(g.k.Desired(), coordinator.Desired{SHA: g.sha, CommittedAt: g.at})
}

func (g *groupPairs) node(name, sha string, state coordinator.NodeStatus, since time.Time) *groupPairs {
	return g.put(g.k.Node(name), coordinator.NodeState{Node: name, SHA: sha, State: state, Since: since})
}

func (g *groupPairs) observe(now time.Time) groupObservation {
	gs := coordinator.Parse(g.k, "web", g.pairs, 1)
	gs.Health, gs.Released, gs.After, gs.Last = g.health, g.released, g.after, g.last
	return observe(newStatusJSON(gs, statusOptions{LostAfter: coordinator.DefaultLostAfter}, now))
}

// The gate's state is read from what coordinator's gate says, for every
// state of coordinator.GateStates: the table must name each of them.
func TestObserveGate(t *testing.T) {
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name  string
		build func(g *groupPairs)
		want  coordinator.GateState
	}{
		{"nothing committed", func(g *groupPairs) { g.pairs = nil }, coordinator.GateUncommitted},
		{"committed", func(g *groupPairs) { g.desired() }, coordinator.GateOpen},
		{"cancelled", func(g *groupPairs) {
			g.desired().put(g.k.Cancel(g.sha), coordinator.Cancel{SHA: g.sha, Reason: "bad image", At: at})
		}, coordinator.GateCancelled},
		{"paused", func(g *groupPairs) {
			g.desired().put(g.k.Pause(g.sha), coordinator.Pause{SHA: g.sha, Failures: 1, Reason: "boom", At: at})
		}, coordinator.GatePaused},
		{"the progress deadline passed under pause", func(g *groupPairs) {
			g.desired().put(g.k.Pause(g.sha), coordinator.Pause{SHA: g.sha, Reason: coordinator.DeadlineReason(time.Hour), At: at,
				Cause: coordinator.CauseProgressDeadline})
		}, coordinator.GateDeadlinePassed},
		{"desired unreadable", func(g *groupPairs) {
			g.pairs = append(g.pairs, &api.KVPair{Key: g.k.Desired(), Value: []byte("garbage")})
		}, coordinator.GateUnreadable},
		{"spec missing", func(g *groupPairs) { g.pairs = nil; g.desired() }, coordinator.GateSpecMissing},
		{"outside its maintenance window", func(g *groupPairs) {
			g.respec(func(s *hashspec.Spec) {
				s.Update.Windows = []hashspec.Window{{Start: "12:00", Length: hashspec.Duration(time.Hour)}}
			}).desired()
		}, coordinator.GateOutsideWindow},
		{"blocked by a Consul check", func(g *groupPairs) {
			g.respec(func(s *hashspec.Spec) { s.Update.BlockOn = []hashspec.Block{{Check: "replication-lag"}} }).desired()
			g.health = &coordinator.GateHealth{Failing: []coordinator.BlockFailure{{Block: hashspec.Block{Check: "replication-lag"},
				Check: "replication-lag", Status: "critical", Node: "db2"}}}
		}, coordinator.GateBlockedByCheck},
		{"a stagger after a release just seen, a node behind", func(g *groupPairs) {
			g.respec(func(s *hashspec.Spec) { s.Update.Stagger = hashspec.Duration(10 * time.Minute) }).desired()
			g.node("n1", "", coordinator.StateWaiting, at)
			g.released = coordinator.ReleaseSeen{At: time.Now()}
		}, coordinator.GateStagger},
		{"waiting for a group", func(g *groupPairs) {
			g.respec(func(s *hashspec.Spec) { s.Update.After = []string{"managers"} }).desired()
			g.after = []coordinator.GroupProgress{{Group: "managers", SHA: g.sha, Converged: 2, Counted: 3}}
		}, coordinator.GateWaitingForGroup},
		// A node's own gate, as its agent reads it (ReadFor): a reader of
		// the whole group is not held by it, and lists the node instead.
		{"the leader's node, waiting to go last", func(g *groupPairs) {
			g.respec(func(s *hashspec.Spec) { s.Update.Last = &hashspec.Last{Check: "raft-leader"} }).desired()
			g.last = &coordinator.LastState{Check: "raft-leader", Local: "h1", Passing: []string{"h1"}, Behind: []string{"n2"}}
		}, coordinator.GateWaitingToGoLast},
		// A reader of the whole group (the exporter's): its gate is open,
		// and the leader's node, not converged, waits for n2.
		{"a node waits to go last, the group's gate open", func(g *groupPairs) {
			g.respec(func(s *hashspec.Spec) { s.Update.Last = &hashspec.Last{Check: "raft-leader"} }).desired()
			g.put(g.k.Node("n1"), coordinator.NodeState{Node: "n1", ConsulNode: "h1", State: coordinator.StateWaiting, Since: at})
			g.node("n2", "", coordinator.StateWaiting, at)
			g.last = &coordinator.LastState{Check: "raft-leader", Passing: []string{"h1"}, Behind: []string{"n2"}}
		}, coordinator.GateWaitingToGoLast},
		{"awaiting promotion: the canary converged, another node behind", func(g *groupPairs) {
			g.respec(func(s *hashspec.Spec) { s.Update.Canary = 1 }).desired()
			g.put(g.k.Canaries(g.sha), coordinator.Canaries{SHA: g.sha, Nodes: []string{"n1"}, At: at})
			g.node("n1", g.sha, coordinator.StateConverged, at).node("n2", "", coordinator.StateWaiting, at)
		}, coordinator.GateAwaitingPromotion},
		{"blocking on Consul checks that pass", func(g *groupPairs) {
			g.respec(func(s *hashspec.Spec) { s.Update.BlockOn = []hashspec.Block{{Check: "replication-lag"}} }).desired()
			g.health = &coordinator.GateHealth{}
		}, coordinator.GateOpen},
	}
	seen := map[coordinator.GateState]bool{}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := newGroupPairs(t, at)
			tc.build(g)
			if o := g.observe(at.Add(time.Minute)); o.Gate != tc.want {
				t.Fatalf("gate %q, want %q", o.Gate, tc.want)
			}
		})
		seen[tc.want] = true
	}
	for _, s := range coordinator.GateStates {
		if !seen[s] {
			t.Errorf("no case reaches gate state %q", s)
		}
	}
}

// Counts, progress and the time of the last convergence on the desired SHA.
func TestObserveNodes(t *testing.T) {
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	old := "0000000000000000000000000000000000000000000000000000000000000000"
	tests := []struct {
		name          string
		build         func(g *groupPairs)
		behind        int
		lastConverged time.Time
		nodes         map[coordinator.Standing]int // the counts that are not 0
	}{
		{"none converged since the commit counts from the commit", func(g *groupPairs) {
			g.desired().node("a", old, coordinator.StateConverged, at.Add(-time.Hour)).
				node("b", old, coordinator.StateWaiting, at.Add(time.Second))
		}, 2, at, map[coordinator.Standing]int{coordinator.StandingBehind: 1, coordinator.StandingWaiting: 1}},
		{"the latest convergence on the desired SHA", func(g *groupPairs) {
			g.desired().node("a", g.sha, coordinator.StateConverged, at.Add(2*time.Minute)).
				node("b", g.sha, coordinator.StateConverged, at.Add(5*time.Minute)).
				node("c", old, coordinator.StateFailed, at.Add(9*time.Minute)).
				node("d", old, coordinator.StateReplacing, at.Add(9*time.Minute))
		}, 2, at.Add(5 * time.Minute), map[coordinator.Standing]int{coordinator.StandingConverged: 2,
			coordinator.StandingFailed: 1, coordinator.StandingReplacing: 1}},
		{"nothing committed", func(g *groupPairs) {
			g.pairs = nil
			g.node("a", old, coordinator.StateConverged, at)
		}, 1, time.Time{}, map[coordinator.Standing]int{coordinator.StandingBehind: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := newGroupPairs(t, at)
			tc.build(g)
			o := g.observe(at.Add(time.Hour))
			if o.Behind != tc.behind || !o.LastConverged.Equal(tc.lastConverged) {
				t.Errorf("behind %d, last converged %v; want %d, %v", o.Behind, o.LastConverged, tc.behind, tc.lastConverged)
			}
			for _, s := range coordinator.Standings {
				if o.Nodes[s] != tc.nodes[s] {
					t.Errorf("nodes %v, want %v", o.Nodes, tc.nodes)
				}
			}
		})
	}
}

// gather collects c's metrics by name, then by their labels but group.
func gather(t *testing.T, c prometheus.Collector) map[string]map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return byName(mfs)
}

func byName(mfs []*dto.MetricFamily) map[string]map[string]float64 {
	out := map[string]map[string]float64{}
	for _, mf := range mfs {
		series := map[string]float64{}
		for _, m := range mf.Metric {
			key := ""
			for _, l := range m.Label {
				if l.GetName() != "group" {
					key += l.GetName() + "=" + l.GetValue()
				}
			}
			switch {
			case m.Gauge != nil:
				series[key] = m.Gauge.GetValue()
			case m.Counter != nil:
				series[key] = m.Counter.GetValue()
			}
		}
		out[mf.GetName()] = series
	}
	return out
}

// Every gate state and every node state is exported for a group, zeros
// included, so that an alert on a state that is absent now still has a
// series to match; exactly one gate state is 1.
func TestGroupMetricsExportEveryState(t *testing.T) {
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, want := range coordinator.GateStates {
		t.Run(string(want), func(t *testing.T) {
			ch := make(chan prometheus.Metric, 64)
			collectObservation(ch, "web", groupObservation{Gate: want, Committed: true, LastConverged: at}, at.Add(90*time.Second))
			close(ch)
			c := &staticCollector{}
			for m := range ch {
				c.metrics = append(c.metrics, m)
			}
			got := gather(t, c)
			gate := got["rollagent_group_gate"]
			if len(gate) != len(coordinator.GateStates) {
				t.Fatalf("gate series %v, want one per state of %v", gate, coordinator.GateStates)
			}
			for _, s := range coordinator.GateStates {
				if v, ok := gate["state="+string(s)]; !ok || v != b2f(s == want) {
					t.Errorf("gate{state=%q} = %v (exported %v), want %v", s, v, ok, b2f(s == want))
				}
			}
			nodes := got["rollagent_group_nodes"]
			for _, s := range coordinator.Standings {
				if v, ok := nodes["state="+string(s)]; !ok || v != 0 {
					t.Errorf("nodes{state=%q} = %v (exported %v), want 0", s, v, ok)
				}
			}
			if v := got["rollagent_group_seconds_since_converged"][""]; v != 90 {
				t.Errorf("seconds since converged %v, want 90", v)
			}
		})
	}
}

// Before any read a group has only its up gauge (0) and error counter.
func TestGroupCollectorBeforeRead(t *testing.T) {
	c := newGroupCollector([]string{"web"}, coordinator.DefaultLostAfter, time.Now)
	c.failed("web")
	got := gather(t, c)
	names := make([]string, 0, len(got))
	for n := range got {
		names = append(names, n)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"rollagent_group_read_errors_total", "rollagent_group_up"}) {
		t.Fatalf("metrics %v, want only up and read errors", names)
	}
	if got["rollagent_group_up"][""] != 0 || got["rollagent_group_read_errors_total"][""] != 1 {
		t.Fatalf("up %v, read errors %v; want 0, 1", got["rollagent_group_up"], got["rollagent_group_read_errors_total"])
	}
}

// staticCollector replays metrics collected once.
type staticCollector struct{ metrics []prometheus.Metric }

func (s *staticCollector) Describe(ch chan<- *prometheus.Desc) { prometheus.DescribeByCollect(s, ch) }
func (s *staticCollector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range s.metrics {
		ch <- m
	}
}
