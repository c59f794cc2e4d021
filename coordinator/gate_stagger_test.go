package coordinator

import (
	"strings"
	"testing"
	"time"

	"github.com/rollagent/rollagent/hashspec"
)

func TestStaggerRule(t *testing.T) {
	const stagger = 5 * time.Minute
	with := hashspec.Duration(stagger)
	spec := func(d hashspec.Duration) *hashspec.Spec {
		s := specWith(t, "pause", 1, 2)
		s.Update.Stagger = d
		return s
	}
	behind := map[string]NodeStatus{"n1": StateConverged, "n2": StateWaiting}
	done := map[string]NodeStatus{"n1": StateConverged, "n2": StateConverged}
	mono := time.Now()                                 // the look, on the evaluator's monotonic clock
	now := time.Date(2026, 6, 2, 0, 0, 0, 0, time.UTC) // the look, on its wall clock
	for _, tc := range []struct {
		name    string
		spec    *hashspec.Spec
		nodes   map[string]NodeStatus
		seen    time.Duration // how long before the look the release was first seen; <0: none seen
		noMono  bool          // the evaluator gives no monotonic time
		closes  bool
		recheck time.Duration // after now
		wait    string
	}{
		{"no stagger", spec(0), behind, 0, false, false, 0, ""},
		{"nothing released", spec(with), behind, -1, false, false, 0, ""},
		{"a release just seen", spec(with), behind, 0, false, true, stagger, "(in 5m)"},
		{"a release seen 3m ago", spec(with), behind, 3 * time.Minute, false, true, 2 * time.Minute, "(in 2m)"},
		{"the stagger just passed", spec(with), behind, stagger, false, false, 0, ""},
		{"long past", spec(with), behind, time.Hour, false, false, 0, ""},
		{"no node behind: done, not held", spec(with), done, 0, false, false, 0, ""},
		{"no monotonic time: none passed", spec(with), behind, time.Hour, true, true, stagger, "(in 5m)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := group(fixture{spec: tc.spec, nodes: tc.nodes})(t)
			if tc.seen >= 0 {
				g.Released = ReleaseSeen{At: mono.Add(-tc.seen)}
			}
			in := GateInput{Group: g, Now: now, Mono: mono}
			if tc.noMono {
				in.Mono = time.Time{}
			}
			c, closed := staggerRule{}.Close(in)
			if closed != tc.closes {
				t.Fatalf("closes %v, want %v (%+v)", closed, tc.closes, c)
			}
			v := Evaluate(in)
			if !closed {
				if !c.Recheck.IsZero() || !v.Open {
					t.Fatalf("open, with no time of its own to look again: %+v, verdict %+v", c, v)
				}
				return
			}
			if !c.Hold || c.Node != "" || !strings.HasPrefix(c.Reason, "stagger: next grant after 5m") || !c.Recheck.Equal(now.Add(tc.recheck)) {
				t.Fatalf("closed %+v: want a hold, node state waiting, the stagger's reason and recheck %s", c, now.Add(tc.recheck))
			}
			if v.State != GateStagger || !v.Hold || v.BeforeStep || !strings.HasSuffix(v.Wait(now), tc.wait) {
				t.Fatalf("verdict %+v (Wait %q), want stagger ending %q", v, v.Wait(now), tc.wait)
			}
		})
	}
	// A CANCEL stops every step: it wins over a hold.
	g := group(fixture{spec: spec(with), nodes: behind, cancel: true})(t)
	g.Released = ReleaseSeen{At: mono}
	if v := Evaluate(GateInput{Group: g, Now: now, Mono: mono}); v.State != GateCancelled {
		t.Errorf("cancelled during a stagger: %+v", v)
	}
}

// The stagger is lockstep's too: LockGate carries it to every grant.
func TestLockGateCarriesTheStagger(t *testing.T) {
	s := specWith(t, "pause", 1, 2)
	s.Update.Stagger = hashspec.Duration(time.Minute)
	g := group(fixture{spec: s})(t)
	k, _ := NewKeys("", "web")
	if lg := g.LockGate(k); lg.Stagger != time.Minute {
		t.Fatalf("lockstep gate %+v, want its stagger 1m", lg)
	}
}
