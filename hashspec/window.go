package hashspec

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	// Every host reads time zones from the same database, the one built
	// into the binary: hosts with different tzdata packages (or none, as in
	// an image built FROM scratch) would otherwise disagree on when a
	// window opens.
	_ "time/tzdata"
)

// Window is one maintenance window of a group: new replacement slots are
// granted only while at least one of its windows is open (a group with
// none is always open). A window opens at Start, local time in TimeZone,
// on each of Days, and stays open for Length of elapsed time, so across a
// DST change it is still Length long, and it may run past midnight.
type Window struct {
	// Days are the weekdays it opens on, "mon" to "sun"; empty means
	// every day.
	Days []string `json:"days,omitempty"`
	// Start is the local time it opens, "HH:MM" (24-hour clock).
	Start string `json:"start"`
	// Length is how long it stays open, at most a week.
	Length Duration `json:"length"`
	// TimeZone is an IANA zone name; optional, defaults to "UTC".
	TimeZone string `json:"time_zone,omitempty"`
}

// MaxWindowLength bounds a window: a week covers every day.
const MaxWindowLength = Duration(7 * 24 * time.Hour)

// weekdays are the names of Days, in Go's order (Sunday first).
var weekdays = [7]string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}

func weekdayOf(name string) (time.Weekday, bool) {
	i := slices.Index(weekdays[:], name)
	return time.Weekday(i), i >= 0
}

// normalWindows gives windows one spelling each, so specs that mean the
// same windows share a SHA: days in week order (Monday first) without
// repeats, all seven written as none, "UTC" as none, and the windows in
// a fixed order.
func normalWindows(ws []Window) []Window {
	if len(ws) == 0 {
		return nil
	}
	out := make([]Window, len(ws))
	for i, w := range ws {
		w.Days = normalDays(w.Days)
		if w.TimeZone == "UTC" {
			w.TimeZone = ""
		}
		out[i] = w
	}
	slices.SortFunc(out, func(a, b Window) int {
		return cmp.Or(strings.Compare(a.TimeZone, b.TimeZone), strings.Compare(a.Start, b.Start),
			cmp.Compare(a.Length, b.Length), slices.Compare(a.Days, b.Days))
	})
	return slices.CompactFunc(out, func(a, b Window) bool {
		return a.TimeZone == b.TimeZone && a.Start == b.Start && a.Length == b.Length && slices.Equal(a.Days, b.Days)
	})
}

// normalDays sorts known days Monday first and drops repeats; unknown
// names are kept, last, for Validate to report.
func normalDays(days []string) []string {
	rank := func(d string) int {
		if wd, ok := weekdayOf(d); ok {
			return (int(wd) + 6) % 7
		}
		return 7
	}
	out := slices.Clone(days)
	slices.SortStableFunc(out, func(a, b string) int { return cmp.Compare(rank(a), rank(b)) })
	out = slices.Compact(out)
	if len(out) == 7 && rank(out[6]) == 6 {
		return nil
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func (c *checker) windows(ws []Window) {
	for i, w := range ws {
		f := indexPath(pathWindow, i)
		for j, d := range w.Days {
			if _, ok := weekdayOf(d); !ok {
				c.add(indexPath(f+".days", j), `must be one of "mon", "tue", "wed", "thu", "fri", "sat", "sun", got %q`, d)
			}
		}
		if _, err := parseClock(w.Start); err != nil {
			c.add(f+".start", "%v", err)
		}
		if w.Length <= 0 || w.Length > MaxWindowLength {
			c.add(f+".length", "must be more than 0s and at most %s, got %s", MaxWindowLength, w.Length)
		}
		if _, err := loadZone(w.TimeZone); err != nil {
			c.add(f+".time_zone", "%v", err)
		}
	}
}

// parseClock reads "HH:MM" as minutes after midnight.
func parseClock(s string) (int, error) {
	t, err := time.Parse("15:04", s)
	if err != nil || len(s) != 5 {
		return 0, fmt.Errorf(`must be a time of day "HH:MM" (24-hour clock, e.g. "02:00"), got %q`, s)
	}
	return t.Hour()*60 + t.Minute(), nil
}

func loadZone(name string) (*time.Location, error) {
	if name == "" {
		return time.UTC, nil
	}
	// LoadLocation also takes "Local" and file paths from $ZONEINFO; a spec
	// means the same on every host, so only names of the built-in database.
	if name == "Local" || strings.HasPrefix(name, "/") || strings.Contains(name, "..") {
		return nil, fmt.Errorf("must be an IANA time zone name such as \"Europe/Berlin\", got %q", name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("unknown time zone %q (want an IANA name such as \"Europe/Berlin\")", name)
	}
	return loc, nil
}
