package hashspec

import (
	"slices"
	"strings"
	"testing"
)

func TestValidateDrain(t *testing.T) {
	drain := func(d Drain) func(s *Spec) { return func(s *Spec) { s.Update.Drain = &d } }
	many := make([]string, MaxDrainServices+1)
	for i := range many {
		many[i] = "s" + strings.Repeat("x", i)
	}
	runValidateCases(t, []validateCase{
		{"no services", drain(Drain{Delay: dur("10s")}), "update.drain.services"},
		{"too many services", drain(Drain{Services: many}), "update.drain.services"},
		{"empty name", drain(Drain{Services: []string{"web", ""}}), "update.drain.services[1]"},
		{"surrounding space", drain(Drain{Services: []string{" web"}}), "update.drain.services[0]"},
		{"control character", drain(Drain{Services: []string{"web\n"}}), "update.drain.services[0]"},
		{"too long", drain(Drain{Services: []string{strings.Repeat("w", MaxBlockNameLen+1)}}), "update.drain.services[0]"},
		{"not UTF-8", drain(Drain{Services: []string{"\xff"}}), "update.drain.services[0]"},
		{"negative delay", drain(Drain{Services: []string{"web"}, Delay: -1}), "update.drain.delay"},
		{"delay too long", drain(Drain{Services: []string{"web"}, Delay: MaxDrainDelay + 1}), "update.drain.delay"},
	})
	s := validSpec()
	s.Update.Drain = &Drain{Services: []string{"web", "web-admin"}, Delay: MaxDrainDelay}
	if err := s.Validate(); err != nil {
		t.Errorf("good drain: %v", err)
	}
}

// Drains that mean the same share a SHA; ones that differ do not, and a
// spec without one keeps the SHA it had before drain existed.
func TestDrainCanonical(t *testing.T) {
	base := func(d *Drain) *Spec { return &Spec{Container: Container{Image: "demo:v1"}, Update: Update{Drain: d}} }
	web := []string{"web"}
	runSHACases(t, []shaCase{
		{"any order", base(&Drain{Services: []string{"b", "a"}}), base(&Drain{Services: []string{"a", "b"}}), true},
		{"a service twice", base(&Drain{Services: []string{"a", "b", "a"}}), base(&Drain{Services: []string{"a", "b"}}), true},
		{"zero delay is none", base(&Drain{Services: web, Delay: 0}), base(&Drain{Services: web}), true},
		{"a drain is not none", base(&Drain{Services: web}), base(nil), false},
		{"a delay is not none", base(&Drain{Services: web, Delay: dur("1s")}), base(&Drain{Services: web}), false},
		{"other services", base(&Drain{Services: web}), base(&Drain{Services: []string{"api"}}), false},
	})
	s := base(&Drain{Services: []string{"b", "a", "b"}}).WithDefaults()
	if !slices.Equal(s.Update.Drain.Services, []string{"a", "b"}) {
		t.Errorf("normalised services = %q, want [a b]", s.Update.Drain.Services)
	}
	c, err := base(nil).Canonical()
	if err != nil || strings.Contains(string(c), "drain") {
		t.Errorf("a spec without drain must not encode one: %s (%v)", c, err)
	}
}

// A drain's errors name the field and its line, in both formats; a
// misspelt attribute, a second drain block and a bad delay are errors.
func TestDrainParseErrors(t *testing.T) {
	hcl := "container {\n  image = \"x\"\n}\nupdate {\n  drain {\n    services = [\"web\"]\n    delay = \"10s\"\n  }\n}\n"
	mustLoad(t, FormatHCL, hcl)
	runParseErrors(t, []parseErrorCase{
		{"HCL misspelt", strings.Replace(hcl, "delay =", "dealy =", 1), FormatHCL, []string{"g.hcl:7", "update.drain.dealy"}},
		{"HCL bad delay", strings.Replace(hcl, `"10s"`, `"10"`, 1), FormatHCL, []string{"g.hcl:7", "update.drain.delay"}},
		{"HCL two blocks", strings.Replace(hcl, "  }\n}", "  }\n  drain {\n  }\n}", 1), FormatHCL, []string{"g.hcl:9", "drain"}},
		{"HCL no services", strings.Replace(hcl, "    services = [\"web\"]\n", "", 1), FormatHCL, []string{"update.drain.services"}},
		{"JSON misspelt", updateJSON("{\"drain\": {\n  \"service\": [\"web\"]}}"), FormatJSON, []string{"g.json:3", "update.drain.service"}},
		{"JSON delay a number", updateJSON("{\"drain\": {\"services\": [\"web\"],\n  \"delay\": 10}}"), FormatJSON, []string{"g.json:3", "update.drain.delay"}},
		{"JSON services a string", updateJSON(`{"drain": {"services": "web"}}`), FormatJSON, []string{"g.json:2", "update.drain.services"}},
		{"JSON a null service", updateJSON(`{"drain": {"services": [null]}}`), FormatJSON, []string{"update.drain.services[0]"}},
		{"JSON empty drain", updateJSON(`{"drain": {}}`), FormatJSON, []string{"update.drain.services"}},
	})
}

// The golden pair parses to the same normalised drain in both formats.
func TestDrainGoldenPair(t *testing.T) {
	h := parseGolden(t, "drain.hcl", FormatHCL).WithDefaults()
	j := parseGolden(t, "drain.json", FormatJSON).WithDefaults()
	want := Drain{Services: []string{"web", "web-admin"}, Delay: dur("10s")}
	for name, s := range map[string]Spec{"hcl": h, "json": j} {
		if d := s.Update.Drain; d == nil || !slices.Equal(d.Services, want.Services) || d.Delay != want.Delay {
			t.Errorf("%s: drain = %+v, want %+v", name, d, want)
		}
	}
}
