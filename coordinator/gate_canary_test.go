package coordinator

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rollagent/rollagent/hashspec"
)

// canaryFixture is a group of n1..n3 whose spec has one canary, n1,
// recorded unless noRecord, and, with auto, auto-promotion after 10m.
type canaryFixture struct {
	auto, noRecord, emptyRecord bool
	promoted, promotedOther     bool
	cancel, opPause             bool
	nodes                       map[string]NodeStatus
}

const canaryHealthy = 10 * time.Minute

func (cf canaryFixture) state(t *testing.T) *GroupState {
	t.Helper()
	s := specWith(t, "pause", 1, 1)
	s.Update.Canary = 1
	if cf.auto {
		s.Update.AutoPromote, s.Update.CanaryHealthyTime = true, hashspec.Duration(canaryHealthy)
	}
	sha, _ := s.SHA()
	raw := map[string]string{}
	put := func(key string, v any) { b, _ := json.Marshal(v); raw[key] = string(b) }
	switch {
	case cf.emptyRecord:
		put("canaries/"+sha, Canaries{SHA: sha, Nodes: []string{}})
	case !cf.noRecord:
		put("canaries/"+sha, Canaries{SHA: sha, Nodes: []string{"n1"}})
	}
	if cf.promoted {
		put("promoted/"+sha, Promotion{SHA: sha, By: "ops@host"})
	}
	if cf.promotedOther {
		other := strings.Repeat("a", len(sha))
		raw["promoted/"+sha] = `{"sha":"` + other + `"}` // a record of another SHA under this one's key
	}
	return fixture{spec: s, nodes: cf.nodes, garbage: raw, cancel: cf.cancel, opPause: cf.opPause}.state(t)
}

func TestCanaryRule(t *testing.T) {
	canaryMoving := map[string]NodeStatus{"n1": StateReplacing, "n2": StateWaiting, "n3": StateWaiting}
	canaryDone := map[string]NodeStatus{"n1": StateConverged, "n2": StateWaiting, "n3": StateWaiting}
	allDone := map[string]NodeStatus{"n1": StateConverged, "n2": StateConverged, "n3": StateConverged}
	mono := time.Now()
	now := time.Date(2026, 6, 2, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		f      canaryFixture
		node   string        // "" judges the group
		seen   time.Duration // how long the canaries were seen healthy; <0 never
		closes bool
		poll   bool
	}{
		{"a canary goes under K", canaryFixture{nodes: canaryMoving}, "n1", -1, false, false},
		{"another node waits", canaryFixture{nodes: canaryMoving}, "n2", -1, true, false},
		{"the group is open while the canaries move", canaryFixture{nodes: canaryMoving}, "", -1, false, false},
		{"the group awaits promotion once they are done", canaryFixture{nodes: canaryDone}, "", -1, true, false},
		{"a finished rollout is not held", canaryFixture{nodes: allDone}, "", -1, false, false},
		{"promoted by hand", canaryFixture{nodes: canaryDone, promoted: true}, "n2", -1, false, false},
		{"a promotion of another SHA is none", canaryFixture{nodes: canaryDone, promotedOther: true}, "n2", -1, true, false},
		{"no canary record holds every node", canaryFixture{nodes: canaryMoving, noRecord: true}, "n1", -1, true, false},
		{"no node counted at the commit: no canary stage", canaryFixture{nodes: canaryMoving, emptyRecord: true}, "n2", -1, false, false},
		{"auto: not yet healthy, looks again", canaryFixture{nodes: canaryDone, auto: true}, "n2", -1, true, true},
		{"auto: healthy for less than the time", canaryFixture{nodes: canaryDone, auto: true}, "n2", canaryHealthy - time.Second, true, false},
		{"auto: healthy for the time", canaryFixture{nodes: canaryDone, auto: true}, "n2", canaryHealthy, false, false},
		{"auto: the group, not yet seen healthy", canaryFixture{nodes: canaryDone, auto: true}, "", -1, true, true},
		{"auto: the group, another node converged", canaryFixture{nodes: map[string]NodeStatus{"n1": StateConverged, "n2": StateConverged, "n3": StateWaiting}, auto: true}, "", -1, false, false},
		{"by hand: the group, another node converged is no promotion", canaryFixture{nodes: map[string]NodeStatus{"n1": StateConverged, "n2": StateConverged, "n3": StateWaiting}}, "", -1, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := tc.f.state(t)
			if tc.seen >= 0 {
				g.CanarySeen = CanarySeen{At: mono.Add(-tc.seen)}
			}
			in := GateInput{Group: g, Now: now, Mono: mono, Node: tc.node}
			c, closed := canaryRule{}.Close(in)
			if closed != tc.closes {
				t.Fatalf("closes %v, want %v (%+v)", closed, tc.closes, c)
			}
			if !closed {
				return
			}
			if c.Hold != (tc.node == "") || !strings.HasPrefix(c.Reason, "awaiting promotion") || !strings.Contains(c.Opens, "rollagent promote web") || c.Poll != tc.poll {
				t.Fatalf("closed %+v: want awaiting promotion (a hold for the group only), opened by `rollagent promote web`, poll %v", c, tc.poll)
			}
			if tc.f.auto && (c.Recheck.IsZero() || c.Recheck.After(now.Add(CanaryRecheck))) {
				t.Fatalf("auto-promotion waiting: recheck %s, want within %s", c.Recheck, CanaryRecheck)
			}
			if v := Evaluate(in); v.State != GateAwaitingPromotion || v.Open || v.Limit != 0 {
				t.Fatalf("verdict %+v, want awaiting_promotion with no slot", v)
			}
		})
	}
}

// A brake is the verdict over a promotion, by hand or by time, and it
// keeps the canaries' clock from counting: neither a CANCEL nor a pause
// ever promotes (argo-rollouts#1152).
func TestCanaryBrakesNeverPromote(t *testing.T) {
	done := map[string]NodeStatus{"n1": StateConverged, "n2": StateWaiting, "n3": StateWaiting}
	mono := time.Now()
	for _, tc := range []struct {
		name  string
		f     canaryFixture
		state GateState
	}{
		{"cancel over a promotion", canaryFixture{nodes: done, promoted: true, cancel: true}, GateCancelled},
		{"pause over a promotion", canaryFixture{nodes: done, promoted: true, opPause: true}, GatePaused},
		{"cancel over healthy canaries", canaryFixture{nodes: done, auto: true, cancel: true}, GateCancelled},
		{"pause over healthy canaries", canaryFixture{nodes: done, auto: true, opPause: true}, GatePaused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := tc.f.state(t)
			g.CanarySeen = CanarySeen{At: mono.Add(-time.Hour)}
			if v := Evaluate(GateInput{Group: g, Now: time.Now(), Mono: mono, Node: "n2"}); v.State != tc.state || v.Open {
				t.Fatalf("verdict %+v, want %s", v, tc.state)
			}
			if tc.f.auto && g.canaryHealthy() {
				t.Fatal("the canaries' clock counts under a brake")
			}
		})
	}
	// The clock starts again after a brake: a store that saw the
	// canaries healthy, then a pause, then healthy again, counts from the
	// last sight.
	s := &Store{canaries: &canaryClocks{clocks: map[string]canarySight{}}}
	k, _ := NewKeys("", "web")
	healthy := canaryFixture{nodes: done, auto: true}.state(t)
	first := s.withCanaries(healthy, k).CanarySeen.At
	s.withCanaries(canaryFixture{nodes: done, auto: true, opPause: true}.state(t), k)
	again := s.withCanaries(canaryFixture{nodes: done, auto: true}.state(t), k).CanarySeen.At
	if first.IsZero() || !again.After(first) {
		t.Fatalf("healthy from %s, after a pause from %s: want later", first, again)
	}
}

// The canaries are a function of the SHA and the set of nodes alone:
// every reader (and every restart) makes the same choice, whatever order
// it lists the nodes in. The picks are pinned: a change of the hash would
// change the canaries of every rollout under way.
func TestChooseCanaries(t *testing.T) {
	sha := strings.Repeat("ab", 32)
	nodes := []string{"n1", "n2", "n3", "n4", "n5", "n6"}
	want := ChooseCanaries(sha, nodes, 2)
	for _, tc := range []struct {
		name  string
		sha   string
		nodes []string
		n     int
		want  []string
	}{
		{"pinned", sha, nodes, 2, pinnedCanaries},
		{"order does not matter", sha, []string{"n6", "n4", "n2", "n5", "n3", "n1"}, 2, want},
		{"repeats do not matter", sha, append(slices.Clone(nodes), nodes...), 2, want},
		{"one more is the same first picks", sha, nodes, 3, nil},
		{"more than the nodes is every node", sha, nodes, 10, nil},
		{"none", sha, nodes, 0, []string{}},
		{"no nodes", sha, nil, 2, []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ChooseCanaries(tc.sha, tc.nodes, tc.n)
			switch {
			case tc.want != nil && !slices.Equal(got, tc.want):
				t.Fatalf("got %v, want %v", got, tc.want)
			case tc.n > 2 && (len(got) != min(tc.n, len(nodes)) || !slices.Equal(got[:2], want)):
				t.Fatalf("got %v: want %d picks starting %v", got, min(tc.n, len(nodes)), want)
			}
		})
	}
	// Removing a node that was not picked moves no pick.
	rest := slices.DeleteFunc(slices.Clone(nodes), func(n string) bool { return !slices.Contains(want, n) && n != nodes[0] && n != nodes[1] })
	if got := ChooseCanaries(sha, rest, 2); !slices.Equal(got, want) {
		t.Errorf("without unpicked nodes: %v, want %v", got, want)
	}
	// Another SHA ranks the nodes anew (so one node is not always first).
	firsts := map[string]bool{}
	for _, c := range "0123456789abcdef" {
		firsts[ChooseCanaries(strings.Repeat(string(c), 64), nodes, 1)[0]] = true
	}
	if len(firsts) < 2 {
		t.Errorf("16 SHAs all picked %v first", firsts)
	}
}

var pinnedCanaries = []string{"n3", "n1"}

// A plan of a spec with canaries meets the gate the commit would: its own
// choice of canaries, no promotion (not even the old rollout's), open to
// the canaries and the group, closed to the others.
func TestPlannedCanaries(t *testing.T) {
	g := canaryFixture{nodes: map[string]NodeStatus{"n1": StateConverged, "n2": StateConverged, "n3": StateConverged}, promoted: true}.state(t)
	s := specWith(t, "pause", 1, 2)
	s.Update.Canary = 1
	sha, _ := s.SHA()
	p := g.plannedAs(s, sha, time.Now())
	want := ChooseCanaries(sha, []string{"n1", "n2", "n3"}, 1)
	if p.Canaries == nil || !slices.Equal(p.Canaries.Nodes, want) || p.Promoted != nil {
		t.Fatalf("planned canaries %+v, promoted %+v: want %v and none", p.Canaries, p.Promoted, want)
	}
	if v := Evaluate(GateInput{Group: p, Now: time.Now(), Mono: time.Now()}); !v.Open {
		t.Fatalf("the planned group's gate: %s (%s), want open to the canaries", v.State, v.Reason)
	}
	other := slices.DeleteFunc([]string{"n1", "n2", "n3"}, func(n string) bool { return n == want[0] })[0]
	if v := Evaluate(GateInput{Group: p, Now: time.Now(), Mono: time.Now(), Node: other}); v.State != GateAwaitingPromotion {
		t.Fatalf("%s's planned gate: %s, want awaiting_promotion", other, v.State)
	}
}

// Spread over update.max_parallel_per's domains, the canaries cover as
// many zones as they can, each zone's pick by the same rank, whatever the
// order of the nodes; a node with no zone is a zone of its own.
func TestChooseCanariesIn(t *testing.T) {
	sha := strings.Repeat("cd", 32)
	zones := map[string]string{"a1": "zone=a", "a2": "zone=a", "b1": "zone=b", "b2": "zone=b", "c1": "zone=c", "c2": "zone=c"}
	nodes := []string{"a1", "a2", "b1", "b2", "c1", "c2"}
	zonesOf := func(picks []string) map[string]int {
		out := map[string]int{}
		for _, p := range picks {
			out[cmpOr(zones[p], p)]++
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		nodes   []string
		domains map[string]string
		n       int
		want    map[string]int // picks per zone
	}{
		{"one per zone", nodes, zones, 3, map[string]int{"zone=a": 1, "zone=b": 1, "zone=c": 1}},
		{"two zones of three", nodes, zones, 2, nil},
		{"four: one zone twice", nodes, zones, 4, nil},
		{"every node", nodes, zones, 9, map[string]int{"zone=a": 2, "zone=b": 2, "zone=c": 2}},
		{"a node with no zone is its own", append(slices.Clone(nodes), "x"), zones, 4, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ChooseCanariesIn(sha, tc.nodes, tc.n, tc.domains)
			rev := slices.Clone(tc.nodes)
			slices.Reverse(rev)
			if again := ChooseCanariesIn(sha, rev, tc.n, tc.domains); !slices.Equal(got, again) {
				t.Fatalf("%v, and %v with the nodes reversed", got, again)
			}
			per := zonesOf(got)
			if len(got) != min(tc.n, len(tc.nodes)) {
				t.Fatalf("%v: want %d picks", got, min(tc.n, len(tc.nodes)))
			}
			if tc.want != nil && !maps.Equal(per, tc.want) {
				t.Fatalf("%v: per zone %v, want %v", got, per, tc.want)
			}
			// No zone has two picks while another zone has none.
			most, least := 0, len(got)
			for _, z := range []string{"zone=a", "zone=b", "zone=c"} {
				most, least = max(most, per[z]), min(least, per[z])
			}
			if most-least > 1 {
				t.Fatalf("%v: per zone %v, not spread", got, per)
			}
		})
	}
	if got := ChooseCanariesIn(sha, nodes, 3, nil); !slices.Equal(got, ChooseCanaries(sha, nodes, 3)) {
		t.Errorf("with no domains: %v, want ChooseCanaries' %v", got, ChooseCanaries(sha, nodes, 3))
	}
}

func cmpOr(s, or string) string {
	if s == "" {
		return or
	}
	return s
}
