package hashspec

import (
	"strings"
	"testing"
	"time"
)

func TestValidateProgressDeadline(t *testing.T) {
	pd := func(d Duration) func(s *Spec) { return func(s *Spec) { s.Update.ProgressDeadline = d } }
	runValidateCases(t, []validateCase{
		{"negative", pd(-1), pathProgress},
		{"over a day", pd(MaxDuration + 1), pathProgress},
		{"not past healthy_deadline", func(s *Spec) { s.Update.ProgressDeadline = s.Update.HealthyDeadline }, pathProgress},
	})
	for _, d := range []Duration{0, DefaultHealthyDeadline + 1, MaxDuration} {
		s := validSpec()
		s.Update.ProgressDeadline = d
		if err := s.Validate(); err != nil {
			t.Errorf("progress_deadline %s: %v", d, err)
		}
	}
}

// A deadline changes the SHA; none keeps every SHA from before it.
func TestProgressDeadlineCanonical(t *testing.T) {
	base := func(d time.Duration) *Spec {
		return &Spec{Container: Container{Image: "demo:v1"}, Update: Update{ProgressDeadline: Duration(d)}}
	}
	runSHACases(t, []shaCase{
		{"zero is none", base(0), &Spec{Container: Container{Image: "demo:v1"}}, true},
		{"spellings", base(20 * time.Minute), base(1200 * time.Second), true},
		{"a deadline is not none", base(20 * time.Minute), base(0), false},
		{"two deadlines", base(20 * time.Minute), base(21 * time.Minute), false},
	})
}

// Its errors name the field in both formats, and a parse error its line.
func TestProgressDeadlineParseErrors(t *testing.T) {
	hcl := "container {\n  image = \"x\"\n}\nupdate {\n  progress_deadline = \"1m\"\n}\n"
	_, _, err := Load([]byte(hcl), FormatHCL, "g.hcl")
	if err == nil || !strings.Contains(err.Error(), "greater than healthy_deadline") {
		t.Errorf("HCL: want the rule, got %v", err)
	}
	_, _, err = Load([]byte(strings.Replace(hcl, `"1m"`, `"soon"`, 1)), FormatHCL, "g.hcl")
	if err == nil || !strings.Contains(err.Error(), "g.hcl:5") || !strings.Contains(err.Error(), pathProgress) {
		t.Errorf("HCL: want line 5 and the field, got %v", err)
	}
	js := "{\n  \"container\": {\"image\": \"x\"},\n  \"update\": {\n    \"progress_deadline\": \"1m\"\n  }\n}\n"
	_, _, err = Load([]byte(js), FormatJSON, "g.json")
	if err == nil || !strings.Contains(err.Error(), pathProgress) {
		t.Errorf("JSON: want the field, got %v", err)
	}
	_, _, err = Load([]byte(strings.Replace(js, `"1m"`, `"soon"`, 1)), FormatJSON, "g.json")
	if err == nil || !strings.Contains(err.Error(), "g.json:4") {
		t.Errorf("JSON: want line 4, got %v", err)
	}
}
