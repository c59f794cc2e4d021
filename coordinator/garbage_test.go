package coordinator

import (
	"strings"
	"testing"
)

// Every record someone else wrote that cannot be used is a problem naming
// its key, and is left out of what the gate and progress are computed from.
func TestGarbageRecordsAreProblemsNamingTheirKey(t *testing.T) {
	const ghost = "0b7d6d2e-0000-4000-8000-00000000dead"
	tests := []struct {
		name    string
		garbage map[string]string
		problem string
		nodes   int // nodes left in the state
		open    bool
	}{
		{"truncated node", map[string]string{"nodes/n1": `{"node":"n1","sha":"ab`}, "nodes/n1: not a valid record", 0, true},
		{"node record under another node's key", map[string]string{"nodes/n2": `{"node":"n1","state":"converged"}`},
			`nodes/n2: names node "n1", not "n2"`, 0, true},
		{"node in an unknown state", map[string]string{"nodes/n1": `{"node":"n1","state":"done"}`}, `state "done"`, 0, true},
		{"holders not JSON", map[string]string{"slot/.holders": "{holders"}, "is not a holders record", 0, true},
		{"holder with no contender key", map[string]string{"slot/.holders": `{"holders":{"` + ghost + `":{"name":"ghost"}}}`},
			`slot/.holders lists 1 session(s) that hold no slot`, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := fixture{spec: specWith(t, "pause", 1, 1), garbage: tc.garbage}.state(t)
			if got := strings.Join(g.Problems, "\n"); len(g.Problems) != 1 || !strings.Contains(got, tc.problem) {
				t.Fatalf("problems %q, want one with %q", g.Problems, tc.problem)
			}
			if len(g.Nodes) != tc.nodes || g.Gate().Open != tc.open {
				t.Fatalf("nodes %+v gate %+v", g.Nodes, g.Gate())
			}
		})
	}
}

// A failure record that is not JSON still names its key, and a holders
// record stuffed with ghosts names a few of them, not all.
func TestGarbageProblemsStayShort(t *testing.T) {
	f := fixture{spec: specWith(t, "pause", 1, 1)}
	sha, _ := f.spec.SHA()
	var b strings.Builder
	b.WriteString(`{"holders":{`)
	for i := range 1000 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`"` + strings.Repeat("x", 100) + itoa(i) + `":{}`)
	}
	b.WriteString("}}")
	f.garbage = map[string]string{"failures/" + sha + "/n9": "unhealthy!", "slot/.holders": b.String()}
	g := f.state(t)
	if len(g.Problems) != 2 {
		t.Fatalf("problems: %q", g.Problems)
	}
	for _, p := range g.Problems {
		if len(p) > 600 {
			t.Fatalf("a %d-byte problem: %.200s...", len(p), p)
		}
	}
	if !strings.Contains(strings.Join(g.Problems, "\n"), "failures/"+sha+"/n9: not a valid record") ||
		!strings.Contains(strings.Join(g.Problems, "\n"), "lists 1000 session(s)") {
		t.Fatalf("problems do not name the records: %q", g.Problems)
	}
}
