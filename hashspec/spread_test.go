package hashspec

import (
	"strings"
	"testing"
)

func TestValidateSpread(t *testing.T) {
	spread := func(p Spread) func(s *Spec) { return func(s *Spec) { s.Update.MaxParallelPer = &p } }
	runValidateCases(t, []validateCase{
		{"no key", spread(Spread{Max: 1}), "update.max_parallel_per.key"},
		{"key with a space", spread(Spread{Key: "my zone", Max: 1}), "update.max_parallel_per.key"},
		{"key with a dot", spread(Spread{Key: "topology.zone", Max: 1}), "update.max_parallel_per.key"},
		{"key not UTF-8", spread(Spread{Key: "\xff", Max: 1}), "update.max_parallel_per.key"},
		{"key too long", spread(Spread{Key: strings.Repeat("k", MaxSpreadKeyLen+1), Max: 1}), "update.max_parallel_per.key"},
		{"no max", spread(Spread{Key: "zone"}), "update.max_parallel_per.max"},
		{"negative max", spread(Spread{Key: "zone", Max: -1}), "update.max_parallel_per.max"},
	})
	s := validSpec()
	s.Update.MaxParallelPer = &Spread{Key: "rack_id-2", Max: 3}
	if err := s.Validate(); err != nil {
		t.Errorf("good spread: %v", err)
	}
}

// A spread is part of the SHA; a spec without one keeps the SHA it had
// before max_parallel_per existed.
func TestSpreadCanonical(t *testing.T) {
	base := func(p *Spread) *Spec {
		return &Spec{Container: Container{Image: "demo:v1"}, Update: Update{MaxParallelPer: p}}
	}
	runSHACases(t, []shaCase{
		{"same", base(&Spread{Key: "zone", Max: 1}), base(&Spread{Key: "zone", Max: 1}), true},
		{"a spread is not none", base(&Spread{Key: "zone", Max: 1}), base(nil), false},
		{"another key", base(&Spread{Key: "zone", Max: 1}), base(&Spread{Key: "rack", Max: 1}), false},
		{"another max", base(&Spread{Key: "zone", Max: 1}), base(&Spread{Key: "zone", Max: 2}), false},
	})
	c, err := base(nil).Canonical()
	if err != nil || strings.Contains(string(c), "max_parallel_per") {
		t.Errorf("a spec without max_parallel_per must not encode one: %s (%v)", c, err)
	}
}

// A spread's errors name the field, and a parse error its line, in both
// formats; a validation error names the file.
func TestSpreadParseErrors(t *testing.T) {
	hcl := "container {\n  image = \"x\"\n}\nupdate {\n  max_parallel_per {\n    key = \"zone\"\n    max = 1\n  }\n}\n"
	mustLoad(t, FormatHCL, hcl)
	json := "{\"container\": {\"image\": \"x\"},\n \"update\": {\"max_parallel_per\": {\"key\": \"zone\",\n  \"max\": 1}}}\n"
	mustLoad(t, FormatJSON, json)
	runParseErrors(t, []parseErrorCase{
		{"HCL misspelt", strings.Replace(hcl, "max =", "maximum =", 1), FormatHCL, []string{"g.hcl:7", "update.max_parallel_per.maximum"}},
		{"HCL max a string", strings.Replace(hcl, "max = 1", `max = "one"`, 1), FormatHCL, []string{"g.hcl:7", "max"}},
		{"HCL max 0", strings.Replace(hcl, "max = 1", "max = 0", 1), FormatHCL, []string{"g.hcl", "update.max_parallel_per.max"}},
		{"HCL empty key", strings.Replace(hcl, `"zone"`, `""`, 1), FormatHCL, []string{"g.hcl", "update.max_parallel_per.key"}},
		{"HCL no max", strings.Replace(hcl, "    max = 1\n", "", 1), FormatHCL, []string{"update.max_parallel_per.max"}},
		{"HCL two blocks", strings.Replace(hcl, "  }\n}", "  }\n  max_parallel_per {\n  }\n}", 1), FormatHCL, []string{"g.hcl:9", "max_parallel_per"}},
		{"JSON misspelt", strings.Replace(json, `"key"`, `"kye"`, 1), FormatJSON, []string{"g.json:2", "update.max_parallel_per.kye"}},
		{"JSON max a string", strings.Replace(json, `"max": 1`, `"max": "1"`, 1), FormatJSON, []string{"g.json:3", "update.max_parallel_per.max"}},
		{"JSON max 0", strings.Replace(json, `"max": 1`, `"max": 0`, 1), FormatJSON, []string{"g.json", "update.max_parallel_per.max"}},
		{"JSON a number", updateJSON(`{"max_parallel_per": 1}`), FormatJSON, []string{"g.json:2", "update.max_parallel_per"}},
		{"JSON empty", updateJSON(`{"max_parallel_per": {}}`), FormatJSON, []string{"update.max_parallel_per.key", "update.max_parallel_per.max"}},
	})
}

// The golden pair parses to the same spread in both formats.
func TestSpreadGoldenPair(t *testing.T) {
	want := Spread{Key: "zone", Max: 1}
	for _, f := range []struct {
		file   string
		format Format
	}{{"spread.hcl", FormatHCL}, {"spread.json", FormatJSON}} {
		s := parseGolden(t, f.file, f.format).WithDefaults()
		if p := s.Update.MaxParallelPer; p == nil || *p != want {
			t.Errorf("%s: max_parallel_per = %+v, want %+v", f.file, p, want)
		}
	}
}
