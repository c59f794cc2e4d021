package hashspec

import (
	"strings"
	"testing"
	"time"
)

func TestValidateWindows(t *testing.T) {
	win := func(w Window) func(s *Spec) {
		return func(s *Spec) { s.Update.Windows = []Window{w} }
	}
	ok := Window{Start: "02:00", Length: dur("3h"), TimeZone: "Europe/Berlin"}
	with := func(mut func(w *Window)) Window { w := ok; mut(&w); return w }
	runValidateCases(t, []validateCase{
		{"unknown day", win(with(func(w *Window) { w.Days = []string{"mon", "Tue"} })), "update.window[0].days[1]"},
		{"start not a time", win(with(func(w *Window) { w.Start = "2am" })), "update.window[0].start"},
		{"start without leading zero", win(with(func(w *Window) { w.Start = "2:00" })), "update.window[0].start"},
		{"start past midnight", win(with(func(w *Window) { w.Start = "24:00" })), "update.window[0].start"},
		{"start missing", win(with(func(w *Window) { w.Start = "" })), "update.window[0].start"},
		{"length zero", win(with(func(w *Window) { w.Length = 0 })), "update.window[0].length"},
		{"length over a week", win(with(func(w *Window) { w.Length = MaxWindowLength + 1 })), "update.window[0].length"},
		{"zone unknown", win(with(func(w *Window) { w.TimeZone = "Mars/Olympus" })), "update.window[0].time_zone"},
		{"zone of the host", win(with(func(w *Window) { w.TimeZone = "Local" })), "update.window[0].time_zone"},
		{"zone a file", win(with(func(w *Window) { w.TimeZone = "/etc/localtime" })), "update.window[0].time_zone"},
	})
}

// Windows that mean the same share a SHA; ones that differ do not.
func TestWindowsCanonical(t *testing.T) {
	base := func(ws ...Window) *Spec {
		return &Spec{Container: Container{Image: "demo:v1"}, Update: Update{Windows: ws}}
	}
	night := Window{Days: []string{"tue", "mon"}, Start: "02:00", Length: dur("3h"), TimeZone: "Europe/Berlin"}
	same := Window{Days: []string{"mon", "tue", "mon"}, Start: "02:00", Length: dur("180m"), TimeZone: "Europe/Berlin"}
	sunday := Window{Days: []string{"sun"}, Start: "06:00", Length: dur("1h"), TimeZone: "UTC"}
	sundayUTC := Window{Days: []string{"sun"}, Start: "06:00", Length: dur("1h")}
	every := Window{Days: []string{"sun", "sat", "fri", "thu", "wed", "tue", "mon"}, Start: "06:00", Length: dur("1h")}
	daily := Window{Start: "06:00", Length: dur("1h")}
	runSHACases(t, []shaCase{
		{"days in any order, repeated", base(night), base(same), true},
		{"windows in any order", base(night, sunday), base(sundayUTC, same), true},
		{"a window twice", base(night, night), base(night), true},
		{"every day is no days", base(every), base(daily), true},
		{"UTC is no zone", base(sunday), base(sundayUTC), true},
		{"a window is not none", base(daily), base(), false},
		{"another start", base(daily), base(Window{Start: "06:01", Length: dur("1h")}), false},
		{"another zone", base(daily), base(Window{Start: "06:00", Length: dur("1h"), TimeZone: "Europe/London"}), false},
	})
}

// A window's errors name the field and its line, in both formats.
func TestWindowParseErrors(t *testing.T) {
	hcl := "container {\n  image = \"x\"\n}\nupdate {\n  window {\n    start = \"02:00\"\n    length = \"3h\"\n  }\n  window {\n    start = \"25:00\"\n    length = \"soon\"\n  }\n}\n"
	_, _, err := Load([]byte(hcl), FormatHCL, "g.hcl")
	if err == nil || !strings.Contains(err.Error(), "g.hcl:11") || !strings.Contains(err.Error(), "update.window[1].length") {
		t.Errorf("HCL: want the bad length at line 11, got %v", err)
	}
	hcl = strings.Replace(hcl, `"soon"`, `"1h"`, 1)
	_, _, err = Load([]byte(hcl), FormatHCL, "g.hcl")
	if err == nil || !strings.Contains(err.Error(), "update.window[1].start") {
		t.Errorf("HCL: want the bad start named, got %v", err)
	}
	js := "{\"container\": {\"image\": \"x\"},\n \"update\": {\"window\": [\n  {\"start\": \"02:00\", \"length\": \"1h\", \"days\": [\"someday\"]}\n]}}\n"
	_, _, err = Load([]byte(js), FormatJSON, "g.json")
	if err == nil || !strings.Contains(err.Error(), "update.window[0].days[0]") {
		t.Errorf("JSON: want the bad day named, got %v", err)
	}
	if _, _, err := Load([]byte(strings.Replace(js, "someday", "mon", 1)), FormatJSON, "g.json"); err != nil {
		t.Errorf("JSON: a good window: %v", err)
	}
}

func at(t *testing.T, zone, s string) time.Time {
	t.Helper()
	loc, err := time.LoadLocation(zone)
	if err != nil {
		t.Fatal(err)
	}
	v, err := time.ParseInLocation("2006-01-02 15:04", s, loc)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// WindowAt with an injected clock, across midnight, a week, and both DST
// changes of Europe/Berlin in 2026 (29 March 02:00 -> 03:00, 25 October
// 03:00 -> 02:00).
func TestWindowAt(t *testing.T) {
	const berlin = "Europe/Berlin"
	w := func(days, start, length string) Window {
		var d []string
		if days != "" {
			d = strings.Split(days, ",")
		}
		return Window{Days: d, Start: start, Length: dur(length), TimeZone: berlin}
	}
	b := func(s string) time.Time { return at(t, berlin, s) }
	for _, tc := range []struct {
		name        string
		windows     []Window
		now         time.Time
		open        bool
		until, next time.Time // zero: not checked
	}{
		{"no windows: always open", nil, b("2026-06-01 12:00"), true, time.Time{}, time.Time{}},
		{"a minute before", []Window{w("", "02:00", "3h")}, b("2026-06-01 01:59"), false, time.Time{}, b("2026-06-01 02:00")},
		{"at the start", []Window{w("", "02:00", "3h")}, b("2026-06-01 02:00"), true, b("2026-06-01 05:00"), time.Time{}},
		{"at the end", []Window{w("", "02:00", "3h")}, b("2026-06-01 05:00"), false, time.Time{}, b("2026-06-02 02:00")},
		{"past midnight", []Window{w("fri", "22:00", "4h")}, b("2026-06-06 01:00"), true, b("2026-06-06 02:00"), time.Time{}},
		{"next week", []Window{w("mon", "02:00", "1h")}, b("2026-06-02 02:30"), false, time.Time{}, b("2026-06-08 02:00")},
		{"adjacent windows join", []Window{w("", "02:00", "1h"), w("", "03:00", "1h")}, b("2026-06-01 02:30"), true, b("2026-06-01 04:00"), time.Time{}},
		{"a window of almost a week", []Window{w("mon", "00:00", "167h")}, b("2026-06-07 22:00"), true, b("2026-06-07 23:00"), time.Time{}},
		{"the hour a week-long window leaves", []Window{w("mon", "00:00", "167h")}, b("2026-06-07 23:30"), false, time.Time{}, b("2026-06-08 00:00")},
		// A start the spring change skips opens an hour later by the
		// clock on the wall: 02:30 CET is 03:30 CEST.
		{"skipped start, before", []Window{w("", "02:30", "1h")}, b("2026-03-29 03:15"), false, time.Time{}, b("2026-03-29 03:30")},
		{"skipped start, open", []Window{w("", "02:30", "1h")}, b("2026-03-29 03:45"), true, b("2026-03-29 04:30"), time.Time{}},
		// Length is elapsed time: 4h from 01:00 CEST on the autumn change
		// ends at 04:00 CET, not 05:00.
		{"elapsed across fall back", []Window{w("", "01:00", "4h")}, b("2026-10-25 04:30"), false, time.Time{}, b("2026-10-26 01:00")},
		{"elapsed across fall back, open", []Window{w("", "01:00", "4h")}, b("2026-10-25 03:30"), true, b("2026-10-25 04:00"), time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := Update{Windows: tc.windows}
			for _, now := range []time.Time{tc.now, tc.now.UTC(), tc.now.In(time.FixedZone("elsewhere", -7*3600))} {
				got := u.WindowAt(now)
				if got.Open != tc.open {
					t.Fatalf("at %s: open = %v, want %v", now, got.Open, tc.open)
				}
				if !tc.until.IsZero() && !got.Until.Equal(tc.until) {
					t.Errorf("at %s: until %s, want %s", now, got.Until, tc.until)
				}
				if !tc.next.IsZero() && !got.Next.Equal(tc.next) {
					t.Errorf("at %s: next %s, want %s", now, got.Next, tc.next)
				}
			}
		})
	}
}

// A start the autumn change repeats (02:30 comes twice on 25 October in
// Berlin) opens once, at the first: the window is not opened twice.
func TestWindowRepeatedStart(t *testing.T) {
	u := Update{Windows: []Window{{Start: "02:30", Length: dur("30m"), TimeZone: "Europe/Berlin"}}}
	first := time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC) // 02:30 CEST
	if got := u.WindowAt(first.Add(-time.Minute)); got.Open || !got.Next.Equal(first) {
		t.Errorf("before the first 02:30: got %+v, want closed until %s", got, first)
	}
	second := first.Add(time.Hour) // 02:30 CET
	if got := u.WindowAt(second.Add(time.Minute)); got.Open {
		t.Errorf("at the second 02:30 the window is open again: %+v", got)
	}
}
