package hashspec

import (
	"testing"
)

func TestValidateStagger(t *testing.T) {
	stagger := func(d Duration) func(s *Spec) { return func(s *Spec) { s.Update.Stagger = d } }
	runValidateCases(t, []validateCase{
		{"negative", stagger(-dur("1s")), pathStagger},
		{"over a day", stagger(MaxDuration + 1), pathStagger},
	})
	for _, d := range []Duration{0, dur("1ms"), dur("5m"), MaxDuration} {
		s := validSpec()
		s.Update.Stagger = d
		if err := s.Validate(); err != nil {
			t.Errorf("stagger %s: %v", d, err)
		}
	}
}

// A stagger of 0 is none, so every spec from before the field keeps its
// SHA; equal durations share one however they are written.
func TestStaggerCanonical(t *testing.T) {
	base := func(d Duration) *Spec {
		return &Spec{Container: Container{Image: "demo:v1"}, Update: Update{Stagger: d}}
	}
	runSHACases(t, []shaCase{
		{"zero is none", base(0), &Spec{Container: Container{Image: "demo:v1"}}, true},
		{"a stagger is not none", base(dur("1s")), base(0), false},
		{"300s is 5m", base(dur("300s")), base(dur("5m")), true},
		{"5m is not 6m", base(dur("5m")), base(dur("6m")), false},
	})
	wantHashAsNone(t, "an explicit stagger of 0s", `{"container": {"image": "demo:v1"}, "update": {"stagger": "0s"}}`)
}

// Stagger's errors name the field in both formats, and a value that is
// no duration its line too (as every parse error does).
func TestStaggerParseErrors(t *testing.T) {
	runParseErrors(t, []parseErrorCase{
		{"HCL negative", updateHCL("  stagger = \"-5s\"\n"), FormatHCL, []string{"g.hcl: ", pathStagger, "negative"}},
		{"HCL too large", updateHCL("  max_parallel = 2\n  stagger = \"25h\"\n"), FormatHCL, []string{"g.hcl: ", pathStagger, "at most"}},
		{"HCL not a duration", updateHCL("  stagger = \"soon\"\n"), FormatHCL, []string{"g.hcl:5", pathStagger}},
		{"JSON negative", updateJSON("{\n  \"stagger\": \"-1m\"\n}"), FormatJSON, []string{"g.json: ", pathStagger, "negative"}},
		{"JSON a number", updateJSON(`{"stagger": 300}`), FormatJSON, []string{"g.json:2", pathStagger}},
	})
}
