package agent

import (
	"testing"
	"time"
)

// A step of the deadline clock's table: the look at t0+At, and what it
// should come to.
type progressStep struct {
	at        time.Duration
	commit    string
	open      bool
	behind    bool
	fired     bool
	converged []string
	fire      bool
}

// When a node would fire: a look-by-look table on an injected clock, the
// deadline 10m.
func TestProgressClock(t *testing.T) {
	const d = 10 * time.Minute
	t0 := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	on := func(at time.Duration, open bool, conv ...string) progressStep {
		return progressStep{at: at, commit: "c1", open: open, behind: true, converged: conv}
	}
	fires := func(s progressStep) progressStep { s.fire = true; return s }
	cases := []struct {
		name  string
		steps []progressStep
	}{
		{"open throughout", []progressStep{on(0, true), on(5*time.Minute, true), on(9*time.Minute, true), fires(on(10*time.Minute, true))}},
		{"a node converges: starts over", []progressStep{on(0, true), on(8*time.Minute, true, "n2"), on(17*time.Minute, true, "n2"), fires(on(18*time.Minute, true, "n2"))}},
		{"nodes converged before the first look are no progress", []progressStep{on(0, true, "n2", "n3"), fires(on(10*time.Minute, true, "n2", "n3"))}},
		{"a node converged again is no progress", []progressStep{on(0, true, "n2"), on(3*time.Minute, true), fires(on(10*time.Minute, true, "n2"))}},
		{"closed longer than the deadline: nothing counts", []progressStep{on(0, false), on(30*time.Minute, false), on(60*time.Minute, false)}},
		{"closed mid-way: the count pauses", []progressStep{
			on(0, true), on(6*time.Minute, true), on(7*time.Minute, false), on(50*time.Minute, false),
			on(51*time.Minute, true), on(54*time.Minute, true), fires(on(55*time.Minute, true))}},
		{"the interval in which it closed counts for nothing", []progressStep{
			on(0, true), on(6*time.Minute, true), on(9*time.Minute, false), on(10*time.Minute, true), on(13*time.Minute, true), fires(on(14*time.Minute, true))}},
		{"a flapping gate still passes", []progressStep{
			on(0, true), on(3*time.Minute, true), on(4*time.Minute, false), on(5*time.Minute, true), on(8*time.Minute, true),
			on(9*time.Minute, false), on(10*time.Minute, true), on(13*time.Minute, true), on(14*time.Minute, false),
			on(15*time.Minute, true), fires(on(16*time.Minute, true))}},
		{"the node converged: not its to measure", []progressStep{on(0, true), {at: 20 * time.Minute, commit: "c1", open: true}}},
		{"fired already", []progressStep{on(0, true), {at: 20 * time.Minute, commit: "c1", open: true, behind: true, fired: true}}},
		{"a new commit starts over", []progressStep{on(0, true), on(9*time.Minute, true),
			{at: 10 * time.Minute, commit: "c2", open: true, behind: true}, {at: 19 * time.Minute, commit: "c2", open: true, behind: true},
			{at: 20 * time.Minute, commit: "c2", open: true, behind: true, fire: true}}},
		{"nothing committed", []progressStep{{at: 0, open: true, behind: true}, {at: time.Hour, open: true, behind: true}}},
	}
	cases = append(cases, []struct {
		name  string
		steps []progressStep
	}{
		// Listings every quarter of the deadline: a node that converged
		// at +1m is seen by the listing at +4m, which starts the count
		// over from there, later than it did, never earlier.
		{"a convergence is seen at the next listing", []progressStep{on(0, true), on(2*time.Minute, true, "n2"), on(4*time.Minute, true, "n2"),
			on(13*time.Minute, true, "n2"), fires(on(14*time.Minute, true, "n2"))}},
		{"a convergence right before it would fire", []progressStep{on(0, true), on(3*time.Minute, true), on(6*time.Minute, true),
			on(9*time.Minute, true), on(10*time.Minute, true, "n2"), fires(on(20*time.Minute, true, "n2"))}},
	}...)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var c progressClock
			for i, s := range tc.steps {
				v, _ := lookAsTheAgent(&c, progressLook{Commit: s.commit, Deadline: d, Fired: s.fired, Behind: s.behind, Open: s.open,
					Now: t0.Add(s.at)}, s.converged)
				if v.Fire != s.fire {
					t.Fatalf("look %d at +%s: fire %v, want %v (counted %s)", i, s.at, v.Fire, s.fire, c.counted)
				}
			}
		})
	}
}

// lookAsTheAgent looks at l as progressLookAt does: once with the gate
// alone, and again with the nodes converged when the clock asks for them.
func lookAsTheAgent(c *progressClock, l progressLook, converged []string) (progressVerdict, bool) {
	v := c.look(l)
	if !v.List {
		return v, false
	}
	l.Listed, l.Converged = true, converged
	return c.look(l), true
}

// The nodes' records, which cost as much as the fleet is large, are read
// once per quarter of the deadline and when the count would pass: not at
// every look.
func TestProgressClockListsRarely(t *testing.T) {
	const d = 10 * time.Minute
	t0 := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	var c progressClock
	listings := 0
	for at := time.Duration(0); at <= d; at += progressEvery(d) {
		v, listed := lookAsTheAgent(&c, progressLook{Commit: "c1", Deadline: d, Behind: true, Open: true, Now: t0.Add(at)}, nil)
		if listed {
			listings++
		}
		if v.Fire != (at == d) {
			t.Fatalf("at +%s: fire %v", at, v.Fire)
		}
	}
	if listings > 6 {
		t.Fatalf("%d listings in one deadline with a look every %s, want at most 6", listings, progressEvery(d))
	}
}

// A look that could not see counts nothing from the one before.
func TestProgressClockBlind(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	var c progressClock
	l := progressLook{Commit: "c1", Deadline: 10 * time.Minute, Behind: true, Open: true, Listed: true, Now: t0}
	c.look(l)
	c.blind()
	l.Now = t0.Add(9 * time.Minute)
	c.look(l)
	l.Now = t0.Add(18 * time.Minute)
	if v := c.look(l); v.Fire || v.Left != time.Minute {
		t.Fatalf("%+v, want a minute left", v)
	}
}

func TestProgressEvery(t *testing.T) {
	for d, want := range map[time.Duration]time.Duration{
		3 * time.Second: time.Second, time.Minute: 6 * time.Second, time.Hour: 30 * time.Second,
	} {
		if got := progressEvery(d); got != want {
			t.Errorf("progressEvery(%s) = %s, want %s", d, got, want)
		}
	}
}

// Once this process wrote the commit's record, a state read before it
// (which does not show it) does not start the count again.
func TestProgressClockFiredHere(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	c := progressClock{commit: "c1", fired: true}
	l := progressLook{Commit: "c1", Deadline: time.Minute, Behind: true, Open: true, Listed: true, Now: t0}
	for at := time.Duration(0); at <= 3*time.Minute; at += time.Minute {
		l.Now = t0.Add(at)
		if v := c.look(l); v.Fire || v.List {
			t.Fatalf("at +%s: %+v after this process fired", at, v)
		}
	}
	l.Commit = "c2"
	c.look(l)
	l.Now = t0.Add(5 * time.Minute)
	if v := c.look(l); !v.Fire {
		t.Fatalf("a new commit: %+v, want its own count", v)
	}
}
