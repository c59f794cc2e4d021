package coordinator

import (
	"testing"
	"time"

	"github.com/rollagent/rollagent/hashspec"
)

// Two agents whose clocks differ by the skew S around the true time, with
// an injected clock each: each judges the window on its own clock, so one
// S ahead opens and closes S early, one S behind S late, and every grant
// either gives lands within S of the window's true edges (README: a grant
// lands past a window's end by at most the agent's clock error). Their
// looks again (Verdict.Recheck), timed on their own clocks, fall at the
// true edge shifted by their skew too.
func TestWindowClockSkew(t *testing.T) {
	const skew = 2 * time.Second // S: each clock's error, either way
	s := specWith(t, "pause", 1, 1)
	s.Update.Windows = []hashspec.Window{{Days: []string{"tue"}, Start: "02:00", Length: hashspec.Duration(time.Hour), TimeZone: "Europe/Berlin"}}
	g := group(fixture{spec: s})(t)
	start := time.Date(2026, 6, 2, 0, 0, 0, 0, time.UTC) // Tue 02:00 CEST
	end := start.Add(time.Hour)
	agents := []struct {
		name string
		off  time.Duration // its clock minus the true time
	}{{"ahead", skew}, {"behind", -skew}}
	for _, tc := range []struct {
		name          string
		at            time.Time // the true time
		ahead, behind bool      // whether each grants
	}{
		{"before either opens", start.Add(-skew - time.Second), false, false},
		{"ahead opens S early", start.Add(-time.Second), true, false},
		{"behind opens S late", start.Add(time.Second), true, false},
		{"both open", start.Add(skew + time.Second), true, true},
		{"both still open", end.Add(-skew - time.Second), true, true},
		{"ahead closes S early", end.Add(-time.Second), false, true},
		{"behind grants up to S past the end", end.Add(time.Second), false, true},
		{"after both close", end.Add(skew + time.Second), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i, a := range agents {
				now := tc.at.Add(a.off)
				v := Evaluate(GateInput{Group: g, Now: now})
				want := []bool{tc.ahead, tc.behind}[i]
				if v.Open != want {
					t.Fatalf("%s (clock %+v): open = %v, want %v (%s)", a.name, a.off, v.Open, want, v.Reason)
				}
				if v.Open && (tc.at.Before(start.Add(-skew)) || !tc.at.Before(end.Add(skew))) {
					t.Errorf("%s grants at %s, more than S from the window [%s, %s)", a.name, tc.at, start, end)
				}
				// Timed on its own clock from now, the next look falls,
				// in true time, at an edge shifted by its skew.
				edge := start
				if v.Open {
					edge = end
				} else if !tc.at.Before(end.Add(-skew)) {
					edge = start.Add(7 * 24 * time.Hour)
				}
				if next := tc.at.Add(v.Recheck.Sub(now)); !next.Equal(edge.Add(-a.off)) {
					t.Errorf("%s looks again at %s true time, want %s (the edge %s less its skew)", a.name, next, edge.Add(-a.off), edge)
				}
			}
		})
	}
}
