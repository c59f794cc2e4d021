package fleetwatch

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestByDomain(t *testing.T) {
	domainOf := map[string]string{"a1": "zone=a", "a2": "zone=a", "b1": "zone=b"}
	got := ByDomain([]string{"a1", "b1", "a2", "x9"}, domainOf)
	want := map[string][]string{"zone=a": {"a1", "a2"}, "zone=b": {"b1"}, "": {"x9"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ByDomain = %v, want %v", got, want)
	}
}

func TestDomainViolations(t *testing.T) {
	counted := Tally{Samples: 12, MaxDown: 2, MaxHolding: 2, MaxDownInDomain: 2, WorstDomain: "at +1s", probed: true, domains: true}
	for _, tc := range []struct {
		name string
		tl   Tally
		b    Bounds
		want []string
	}{
		{"unchecked by default", counted, AtMost(2), nil},
		{"within", counted, AtMost(2).PerDomain(2), nil},
		{"over", counted, AtMost(2).PerDomain(1), []string{"2 down in one domain at once, want at most 1"}},
		{"over with the total over too", counted, AtMost(1).PerDomain(1),
			[]string{"2 down at once, want at most 1", "2 down in one domain at once", "2 holding a slot"}},
		{"no domains given", Tally{Samples: 12, probed: true}, AtMost(2).PerDomain(1), []string{"a bound of 1 down per domain, but no domains"}},
		{"a node without a domain", Tally{Samples: 12, probed: true, domains: true, undomained: []string{"c1"}},
			AtMost(2).PerDomain(1), []string{"a bound of 1 down per domain, but nodes [c1] have no domain"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.tl.violations(tc.b)
			if len(got) != len(tc.want) {
				t.Fatalf("violations = %q, want %q", got, tc.want)
			}
			for i := range got {
				if !strings.HasPrefix(got[i], tc.want[i]) {
					t.Errorf("violation %d = %q, want it to begin %q", i, got[i], tc.want[i])
				}
			}
		})
	}
}

// TestMonitorCountsDomains runs a monitor over a scripted group of two
// zones: two down in two zones is one per domain, then two down in one
// zone is two, and the report names that zone and its nodes.
func TestMonitorCountsDomains(t *testing.T) {
	up := Workload{Healthy: true}
	nodes := []string{"a1", "a2", "b1", "b2"}
	sc := &script{steps: []step{
		{ws: map[string]Workload{"a1": up, "a2": up, "b1": up, "b2": up}},
		{ws: map[string]Workload{"a2": up, "b2": up}}, // a1 and b1 down: one per zone
		{ws: map[string]Workload{"b1": up, "b2": up}}, // a1 and a2 down: two in zone a
		{ws: map[string]Workload{"a1": up, "a2": up, "b1": up, "b2": up}},
	}}
	m := Start(Options{Groups: map[string][]string{"g": nodes}, Probe: sc.probe, State: sc.state, Every: time.Millisecond,
		Domains: map[string]map[string]string{"g": {"a1": "zone=a", "a2": "zone=a", "b1": "zone=b", "b2": "zone=b"}}})
	waitRounds(t, m, 6)
	tl := m.Tally("g")
	if tl.MaxDown != 2 || tl.MaxDownInDomain != 2 || !strings.Contains(tl.WorstDomain, "zone=a has [a1 a2] down") {
		t.Errorf("MaxDown %d, MaxDownInDomain %d, WorstDomain %q; want 2, 2 in zone=a", tl.MaxDown, tl.MaxDownInDomain, tl.WorstDomain)
	}
	if v := tl.violations(Bounds{Down: 2, Holding: Unbounded, Busy: Unbounded, DownInDomain: 1}); len(v) != 1 {
		t.Errorf("violations of one down per domain = %q, want the zone named", v)
	}
	if got, want := tl.String(), "at most 2 down, at most 2 down in one domain"; !strings.Contains(got, want) {
		t.Errorf("String() = %q, want it to say %q", got, want)
	}
}

// TestMonitorNamesNodesWithoutDomain checks that a node the domains leave
// out is reported, not counted as a domain of its own.
func TestMonitorNamesNodesWithoutDomain(t *testing.T) {
	sc := &script{steps: []step{{ws: map[string]Workload{}}}}
	m := Start(Options{Groups: map[string][]string{"g": {"a1", "c1"}}, Probe: sc.probe, Every: time.Millisecond,
		Domains: map[string]map[string]string{"g": {"a1": "zone=a"}}})
	waitRounds(t, m, 2)
	tl := m.Tally("g")
	if !reflect.DeepEqual(tl.undomained, []string{"c1"}) {
		t.Fatalf("undomained %v, want [c1]", tl.undomained)
	}
	if v := tl.violations(AtMost(2).PerDomain(1)); len(v) != 1 || !strings.Contains(v[0], "[c1] have no domain") {
		t.Fatalf("violations = %q, want c1 named", v)
	}
}
