package hashspec

import (
	"fmt"
	"time"
)

// WindowState is where a time stands against a group's windows.
type WindowState struct {
	// Open: at least one window is open (always, for a group with none).
	Open bool
	// Until is when the open stretch ends (zero for a group without
	// windows): the end of the windows open now, and of any that open
	// before they close, looked at for a week at most, so windows that
	// never leave a gap give a time when the gate is simply looked at again.
	Until time.Time
	// Next is when the next window opens, while closed (zero if none ever
	// does, which Validate rules out).
	Next time.Time
	// NextWindow is the window that opens at Next.
	NextWindow Window
}

// WindowAt says whether a grant may be given at t by the windows of u.
// It reads t's instant only: every host that evaluates it at the same
// instant gets the same answer, whatever its own zone.
func (u Update) WindowAt(t time.Time) WindowState {
	if len(u.Windows) == 0 {
		return WindowState{Open: true}
	}
	if end, open := openUntil(u.Windows, t); open {
		// Bounded: each step moves to a later end, and each window adds at
		// most one opening per day of the week it spans.
		for range 8 * len(u.Windows) {
			next, still := openUntil(u.Windows, end)
			if !still {
				break
			}
			end = next
		}
		return WindowState{Open: true, Until: end}
	}
	var st WindowState
	for _, w := range u.Windows {
		for _, s := range openings(w, t, t.Add(8*24*time.Hour)) {
			if s.After(t) && (st.Next.IsZero() || s.Before(st.Next)) {
				st.Next, st.NextWindow = s, w
			}
		}
	}
	return st
}

// openUntil is the latest end of the windows open at t.
func openUntil(ws []Window, t time.Time) (time.Time, bool) {
	var end time.Time
	for _, w := range ws {
		for _, s := range openings(w, t.Add(-w.Length.Std()), t) {
			if e := s.Add(w.Length.Std()); !s.After(t) && e.After(t) && e.After(end) {
				end = e
			}
		}
	}
	return end, !end.IsZero()
}

// openings are the times w opens between from and to (inclusive, by local
// date, with a day's margin either side for zone offsets).
func openings(w Window, from, to time.Time) []time.Time {
	loc, err := loadZone(w.TimeZone)
	if err != nil {
		return nil // Validate refused it; an unloadable zone never opens
	}
	mins, err := parseClock(w.Start)
	if err != nil {
		return nil
	}
	var out []time.Time
	f, l := from.In(loc), to.In(loc)
	first := time.Date(f.Year(), f.Month(), f.Day()-1, 0, 0, 0, 0, loc)
	last := time.Date(l.Year(), l.Month(), l.Day()+1, 0, 0, 0, 0, loc)
	// Counted by date, not by adding 24h, which a DST change would skew.
	for i := 0; i < 20; i++ {
		day := time.Date(first.Year(), first.Month(), first.Day()+i, 0, 0, 0, 0, loc)
		if day.After(last) {
			break
		}
		if !w.onDay(day.Weekday()) {
			continue
		}
		out = append(out, startOn(day, mins, loc))
	}
	return out
}

// startOn is the instant a window opens on day. A start that a DST change
// skips (02:30 when clocks jump from 02:00 to 03:00) is read with the
// offset before the change, as time.Date does: 02:30 CET is 03:30 CEST. A
// start that happens twice (02:30 when clocks go back from 03:00 to
// 02:00) is the first, which time.Date does not promise.
func startOn(day time.Time, mins int, loc *time.Location) time.Time {
	t := time.Date(day.Year(), day.Month(), day.Day(), mins/60, mins%60, 0, 0, loc)
	first := t
	for _, back := range []time.Duration{30 * time.Minute, time.Hour, 2 * time.Hour} {
		e := t.Add(-back).In(loc)
		if e.Day() == t.Day() && e.Hour() == t.Hour() && e.Minute() == t.Minute() {
			first = e
		}
	}
	return first
}

func (w Window) onDay(d time.Weekday) bool {
	if len(w.Days) == 0 {
		return true
	}
	for _, n := range w.Days {
		if wd, ok := weekdayOf(n); ok && wd == d {
			return true
		}
	}
	return false
}

// String is how status names the window: "Tue 02:00 Europe/Berlin".
func (w Window) String() string {
	zone := w.TimeZone
	if zone == "" {
		zone = "UTC"
	}
	return fmt.Sprintf("%s %s, %s", w.Start, zone, w.Length)
}
