package hashspec

import (
	"testing"
)

func TestValidateCanary(t *testing.T) {
	canary := func(n int, healthy Duration, auto bool) func(s *Spec) {
		return func(s *Spec) {
			s.Update.Canary, s.Update.CanaryHealthyTime, s.Update.AutoPromote = n, healthy, auto
		}
	}
	runValidateCases(t, []validateCase{
		{"negative", canary(-1, 0, false), pathCanary},
		{"over the bound", canary(MaxCanary+1, 0, false), pathCanary},
		{"auto_promote without canaries", canary(0, dur("1m"), true), "update.auto_promote"},
		{"auto_promote without a healthy time", canary(1, 0, true), pathCanaryHealthyTime},
		{"auto_promote with a negative healthy time", canary(1, -dur("1s"), true), pathCanaryHealthyTime},
		{"a healthy time nothing reads", canary(1, dur("1m"), false), pathCanaryHealthyTime},
		{"a healthy time over a day", canary(1, MaxDuration+1, true), pathCanaryHealthyTime},
	})
	for _, c := range []struct {
		n       int
		healthy Duration
		auto    bool
	}{{0, 0, false}, {1, 0, false}, {MaxCanary, 0, false}, {2, dur("1ms"), true}, {3, MaxDuration, true}} {
		s := validSpec()
		canary(c.n, c.healthy, c.auto)(&s)
		if err := s.Validate(); err != nil {
			t.Errorf("canary %d, healthy %s, auto %v: %v", c.n, c.healthy, c.auto, err)
		}
	}
}

// No canary is none, so every spec from before the fields keeps its SHA;
// equal durations share one however they are written.
func TestCanaryCanonical(t *testing.T) {
	base := func(n int, healthy Duration, auto bool) *Spec {
		return &Spec{Container: Container{Image: "demo:v1"}, Update: Update{Canary: n, CanaryHealthyTime: healthy, AutoPromote: auto}}
	}
	runSHACases(t, []shaCase{
		{"zero is none", base(0, 0, false), &Spec{Container: Container{Image: "demo:v1"}}, true},
		{"a canary is not none", base(1, 0, false), base(0, 0, false), false},
		{"by hand is not auto", base(1, dur("1m"), true), base(1, 0, false), false},
		{"90s is 1m30s", base(1, dur("90s"), true), base(1, dur("1m30s"), true), true},
	})
	wantHashAsNone(t, "canary 0", `{"container": {"image": "demo:v1"}, "update": {"canary": 0, "auto_promote": false}}`)
}

// The errors name the field in both formats, and a value of the wrong
// type its line.
func TestCanaryParseErrors(t *testing.T) {
	runParseErrors(t, []parseErrorCase{
		{"HCL negative", updateHCL("  canary = -1\n"), FormatHCL, []string{"g.hcl: ", pathCanary, "negative"}},
		{"HCL auto without time", updateHCL("  canary = 1\n  auto_promote = true\n"), FormatHCL, []string{"g.hcl: ", pathCanaryHealthyTime, "auto_promote"}},
		{"HCL not a duration", updateHCL("  canary = 1\n  canary_healthy_time = \"soon\"\n"), FormatHCL, []string{"g.hcl:6", pathCanaryHealthyTime}},
		{"JSON a string count", updateJSON(`{"canary": "2"}`), FormatJSON, []string{"g.json:2", pathCanary}},
		{"JSON auto a string", updateJSON("{\n \"canary\": 1,\n \"auto_promote\": \"yes\"}"), FormatJSON, []string{"g.json:4", "auto_promote"}},
	})
}
