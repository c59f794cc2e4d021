package coordinator

import (
	"strings"
	"testing"
	"time"
)

// A planned state meets the gate a commit of the new SHA would meet: the
// brakes and failures of the desired SHA stay behind, an operator's pause
// holds across the commit, and the state it was made from is unchanged.
func TestPlannedGate(t *testing.T) {
	a := specWith(t, "pause", 1, 1)
	b := specWith(t, "pause", 1, 3)
	now := time.Date(2026, 1, 2, 4, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		f      fixture
		to     bool // plan a: the desired SHA again, else b
		state  GateState
		reason string
	}{
		{"cancel of the desired SHA", fixture{spec: a, cancel: true}, false, GateOpen, "open"},
		{"failure pause of the desired SHA", fixture{spec: a, pause: true, failures: 1}, false, GateOpen, "open"},
		{"operator pause", fixture{spec: a, opPause: true}, false, GatePaused, "commits since do not lift it"},
		{"the cancelled SHA itself", fixture{spec: a, cancel: true}, true, GateCancelled, "cancelled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := tt.f.state(t)
			before, _ := a.SHA()
			spec := b
			if tt.to {
				spec = a
			}
			sha, _ := spec.SHA()
			p := g.plannedAs(spec, sha, now)
			v := Evaluate(GateInput{Group: p, Now: now})
			if v.State != tt.state || !strings.Contains(v.Reason, tt.reason) || v.SHA != sha {
				t.Fatalf("verdict %+v, want %s with %q for %s", v, tt.state, tt.reason, ShortSHA(sha))
			}
			if v.MaxParallel != spec.Update.MaxParallel.Of(p.NodeCount()) || p.Spec != spec || p.Desired.Previous != before {
				t.Fatalf("planned: K %d, spec %p (want %p), previous %s", v.MaxParallel, p.Spec, spec, p.Desired.Previous)
			}
			if !tt.to && (len(p.Failures) != 0 || p.Pause != nil || p.Cancel != nil) {
				t.Fatalf("records of the old SHA carried over: failures %v pause %v cancel %v", p.Failures, p.Pause, p.Cancel)
			}
			if g.Desired.SHA != before || len(g.History) != 1 || (tt.f.cancel && g.Cancel == nil) {
				t.Fatalf("the state planned from changed: %+v", g.Desired)
			}
		})
	}
}
