package hashspec

import (
	"encoding/json"
	"strings"
	"testing"
)

// The rounding of a percentage, written down in the README and
// docs/gate.md: down, and never below 1.
func TestAmountOf(t *testing.T) {
	for _, tc := range []struct {
		a     Amount
		nodes int
		want  int
	}{
		{Percent(25), 1, 1}, {Percent(25), 3, 1}, {Percent(25), 4, 1}, {Percent(25), 7, 1}, {Percent(25), 8, 2}, {Percent(25), 10, 2},
		{Percent(50), 1, 1}, {Percent(50), 3, 1}, {Percent(50), 4, 2}, {Percent(50), 7, 3}, {Percent(50), 10, 5},
		{Percent(10), 1, 1}, {Percent(10), 7, 1}, {Percent(10), 10, 1}, {Percent(10), 20, 2},
		{Percent(33), 3, 1}, {Percent(34), 3, 1}, {Percent(33), 10, 3},
		{Percent(99), 10, 9}, {Percent(100), 1, 1}, {Percent(100), 7, 7}, {Percent(100), 10, 10},
		{Percent(1), 0, 1}, {Percent(50), 0, 1}, // no node: still 1, a percentage is never 0
		{Count(3), 1, 3}, {Count(3), 10, 3}, // a count is not capped by the group's size
	} {
		t.Run(tc.a.String()+" of "+itoa(tc.nodes), func(t *testing.T) {
			if got := tc.a.Of(tc.nodes); got != tc.want {
				t.Errorf("%s of %d nodes = %d, want %d", tc.a, tc.nodes, got, tc.want)
			}
		})
	}
}

func itoa(n int) string { return Count(n).String() }

func TestValidateAmount(t *testing.T) {
	up := func(f func(u *Update)) func(s *Spec) { return func(s *Spec) { f(&s.Update) } }
	runValidateCases(t, []validateCase{
		{"max_parallel 0%", up(func(u *Update) { u.MaxParallel = Percent(0); u.MaxParallel.Count = 0 }), pathMaxParallel},
		{"max_parallel 101%", up(func(u *Update) { u.MaxParallel = Percent(101) }), pathMaxParallel},
		{"max_parallel -5%", up(func(u *Update) { u.MaxParallel = Percent(-5) }), pathMaxParallel},
		{"max_parallel both", up(func(u *Update) { u.MaxParallel = Amount{Count: 2, Percent: 20} }), pathMaxParallel},
		{"max_failures 101%", up(func(u *Update) { u.MaxFailures = Percent(101) }), pathMaxFailures},
	})
	for _, a := range []Amount{Percent(1), Percent(25), Percent(100), Count(1), Count(40)} {
		s := validSpec()
		s.Update.MaxParallel, s.Update.MaxFailures = a, a
		if err := s.Validate(); err != nil {
			t.Errorf("%s: %v", a, err)
		}
	}
}

// A count keeps the number it always encoded as (so every SHA from before
// percentages stays), a percentage is "N%", and the two formats agree.
func TestAmountCanonical(t *testing.T) {
	base := func(mp, mf Amount) *Spec {
		return &Spec{Container: Container{Image: "demo:v1"}, Update: Update{MaxParallel: mp, MaxFailures: mf}}
	}
	runSHACases(t, []shaCase{
		{"a count is the default", base(Count(1), Count(1)), &Spec{Container: Container{Image: "demo:v1"}}, true},
		{"25% is not 25", base(Percent(25), Count(1)), base(Count(25), Count(1)), false},
		{"100% is not 1", base(Percent(100), Count(1)), base(Count(1), Count(1)), false},
		{"max_failures 10% is not max_parallel 10%", base(Percent(10), Count(1)), base(Count(1), Percent(10)), false},
	})
	s, _ := mustLoad(t, FormatJSON, `{"container": {"image": "demo:v1"}, "update": {"max_parallel": 3, "max_failures": "20%"}}`)
	c, err := s.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(c), `"max_parallel":3,`) || !strings.Contains(string(c), `"max_failures":"20%",`) {
		t.Errorf("canonical: %s", c)
	}
	_, j := mustLoad(t, FormatJSON, `{"container": {"image": "demo:v1"}, "update": {"max_parallel": "50%", "max_failures": 2}}`)
	_, h := mustLoad(t, FormatHCL, "container {\n  image = \"demo:v1\"\n}\nupdate {\n  max_parallel = \"50%\"\n  max_failures = \"2\"\n}\n")
	if j != h {
		t.Errorf("JSON and HCL of one spec must share a SHA: %s vs %s", j, h)
	}
	out, err := json.Marshal(s.Update)
	if err != nil || !strings.Contains(string(out), `"max_parallel":3,`) || !strings.Contains(string(out), `"max_failures":"20%"`) {
		t.Errorf("json.Marshal: %s %v", out, err)
	}
}

// A value that is neither a count nor a whole percentage is refused, on
// its line, in both formats: "25.5%" is not rounded.
func TestAmountParseErrors(t *testing.T) {
	hcl := func(v string) string {
		return "container {\n  image = \"x\"\n}\nupdate {\n  min_healthy_time = \"1s\"\n  max_parallel = " + v + "\n}\n"
	}
	json := func(v string) string {
		return "{\"container\": {\"image\": \"x\"},\n \"update\": {\n  \"max_parallel\": " + v + "\n}}\n"
	}
	runParseErrors(t, []parseErrorCase{
		{"HCL fraction", hcl(`"25.5%"`), FormatHCL, []string{"g.hcl:6", pathMaxParallel, `"25.5%"`}},
		{"HCL 0%", hcl(`"0%"`), FormatHCL, []string{"g.hcl:6", pathMaxParallel, `"0%"`}},
		{"HCL 101%", hcl(`"101%"`), FormatHCL, []string{"g.hcl:6", pathMaxParallel, `"101%"`}},
		{"HCL spaced", hcl(`" 25%"`), FormatHCL, []string{"g.hcl:6", pathMaxParallel}},
		{"HCL word", hcl(`"half"`), FormatHCL, []string{"g.hcl:6", pathMaxParallel, `"half"`}},
		{"HCL float", hcl(`2.5`), FormatHCL, []string{"g.hcl:6", pathMaxParallel, "integer"}},
		{"HCL bool", hcl(`true`), FormatHCL, []string{"g.hcl:6", pathMaxParallel}},
		{"HCL list", hcl(`[1]`), FormatHCL, []string{"g.hcl:6", pathMaxParallel}},
		{"HCL max_failures", updateHCL("  max_failures = \"12.5%\"\n"), FormatHCL, []string{"g.hcl:5", pathMaxFailures}},
		{"JSON fraction", json(`"25.5%"`), FormatJSON, []string{"g.json:3", pathMaxParallel, `"25.5%"`}},
		{"JSON 0%", json(`"0%"`), FormatJSON, []string{"g.json:3", pathMaxParallel}},
		{"JSON 007%", json(`"007%"`), FormatJSON, []string{"g.json:3", pathMaxParallel}},
		{"JSON percent sign alone", json(`"%"`), FormatJSON, []string{"g.json:3", pathMaxParallel}},
		{"JSON bool", json(`true`), FormatJSON, []string{"g.json:3", pathMaxParallel, "a boolean"}},
		{"JSON object", json(`{"percent": 25}`), FormatJSON, []string{"g.json:3", pathMaxParallel, "an object"}},
		{"JSON max_failures", updateJSON(`{"max_failures": "1.5%"}`), FormatJSON, []string{"g.json:2", pathMaxFailures}},
	})
}
