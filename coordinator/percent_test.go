package coordinator

import (
	"strings"
	"testing"

	"github.com/rollagent/rollagent/hashspec"
)

func percentSpec(t *testing.T, parallel, failures string) *hashspec.Spec {
	t.Helper()
	js := `{"name":"web","container":{"image":"demo:v1"},"update":{"max_parallel":` + parallel + `,"max_failures":` + failures + `}}`
	s, _, err := hashspec.Load([]byte(js), hashspec.FormatJSON, "fixture")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func waitingNodes(n int) map[string]NodeStatus {
	out := map[string]NodeStatus{}
	for i := range n {
		out["w"+itoa(i)] = StateWaiting
	}
	return out
}

// The gate's K is the percentage of the group's nodes at the look, rounded
// down and at least 1; a count stays a count; a record that does not
// decode is a node of the group all the same.
func TestGateLimitPercent(t *testing.T) {
	for _, tc := range []struct {
		name     string
		parallel string
		nodes    int
		garbage  bool
		want     int
	}{
		{"25% of 1", `"25%"`, 1, false, 1},
		{"25% of 3", `"25%"`, 3, false, 1},
		{"25% of 4", `"25%"`, 4, false, 1},
		{"25% of 7", `"25%"`, 7, false, 1},
		{"25% of 10", `"25%"`, 10, false, 2},
		{"50% of 1", `"50%"`, 1, false, 1},
		{"50% of 3", `"50%"`, 3, false, 1},
		{"50% of 4", `"50%"`, 4, false, 2},
		{"50% of 7", `"50%"`, 7, false, 3},
		{"50% of 10", `"50%"`, 10, false, 5},
		{"100% of 7", `"100%"`, 7, false, 7},
		{"30% of 3 and an invalid record", `"30%"`, 3, true, 1},
		{"50% of 3 and an invalid record", `"50%"`, 3, true, 2},
		{"a count", `3`, 10, false, 3},
		{"a count over the group", `3`, 1, false, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := fixture{spec: percentSpec(t, tc.parallel, "1"), nodes: waitingNodes(tc.nodes)}
			if tc.garbage {
				f.garbage = map[string]string{"nodes/broken": "{not json"}
			}
			g := f.state(t)
			v := g.Gate()
			if !v.Open || v.Limit != tc.want || v.MaxParallel != tc.want {
				t.Fatalf("gate %+v: want open with K %d", v, tc.want)
			}
			want := tc.nodes + len(f.garbage)
			if g.NodeCount() != want || (v.Nodes != want) != !v.Policy.IsPercent() {
				t.Errorf("nodes %d (NodeCount %d), want %d", v.Nodes, g.NodeCount(), want)
			}
			if lg := g.LockGate(Keys{}); lg.Limit != tc.want {
				t.Errorf("lockstep limit %d, want %d", lg.Limit, tc.want)
			}
		})
	}
}

// max_failures as a percentage: the pause fires exactly when the count of
// failures reaches the number the group means at that failure.
func TestFailureBudgetPercent(t *testing.T) {
	for _, tc := range []struct {
		name     string
		failures string
		nodes    int
		failed   int
		paused   bool
	}{
		{"50% of 4: one failure", `"50%"`, 4, 1, false},
		{"50% of 4: two failures", `"50%"`, 4, 2, true},
		{"10% of 7 is 1", `"10%"`, 7, 1, true},
		{"25% of 10 is 2: one", `"25%"`, 10, 1, false},
		{"25% of 10 is 2: two", `"25%"`, 10, 2, true},
		{"a count of 2: one", `2`, 10, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := percentSpec(t, "1", tc.failures)
			g := fixture{spec: s, nodes: waitingNodes(tc.nodes), failures: tc.failed}.state(t)
			v := g.Gate()
			if paused := v.State == GatePaused; paused != tc.paused {
				t.Fatalf("gate %+v: paused %v, want %v", v, paused, tc.paused)
			}
			if tc.paused && s.Update.MaxFailures.IsPercent() && !strings.Contains(v.Reason, "max_failures="+s.Update.MaxFailures.String()+" (= ") {
				t.Errorf("reason %q: want the percentage and the number it means", v.Reason)
			}
			want := ActionNone
			if tc.paused {
				want = ActionPause
			}
			if got := OnFailure(s, tc.failed, tc.nodes); got != want {
				t.Errorf("OnFailure = %v, want %v", got, want)
			}
		})
	}
}

func TestAmountText(t *testing.T) {
	for _, tc := range []struct {
		a     hashspec.Amount
		nodes int
		want  string
	}{
		{hashspec.Count(2), 8, "2"},
		{hashspec.Percent(25), 8, "25% (= 2 of 8 nodes)"},
		{hashspec.Percent(25), 7, "25% (= 1 of 7 nodes)"},
	} {
		if got := AmountText(tc.a, tc.nodes); got != tc.want {
			t.Errorf("AmountText(%s, %d) = %q, want %q", tc.a, tc.nodes, got, tc.want)
		}
	}
}
