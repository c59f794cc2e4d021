package hashspec

import (
	"slices"
	"strings"
	"testing"
)

func TestValidateOrder(t *testing.T) {
	after := func(gs ...string) func(s *Spec) { return func(s *Spec) { s.Update.After = gs } }
	last := func(check string) func(s *Spec) { return func(s *Spec) { s.Update.Last = &Last{Check: check} } }
	named := func(name string, f func(s *Spec)) func(s *Spec) { return func(s *Spec) { s.Name = name; f(s) } }
	many := make([]string, MaxAfterGroups+1)
	for i := range many {
		many[i] = "g" + strings.Repeat("x", i)
	}
	runValidateCases(t, []validateCase{
		{"too many groups", after(many...), "update.after"},
		{"not a group name", after("a/b"), "update.after[0]"},
		{"empty group", after(""), "update.after[0]"},
		{"its own group", named("managers", after("managers")), "update.after[0]"},
		{"no check", last(""), "update.last.check"},
		{"check with space", last(" leader"), "update.last.check"},
		{"check with a control character", last("leader\n"), "update.last.check"},
		{"check too long", last(strings.Repeat("c", MaxBlockNameLen+1)), "update.last.check"},
	})
	s := validSpec()
	s.Name = "workers"
	s.Update.After, s.Update.Last = []string{"managers", "ingress"}, &Last{Check: "raft-leader"}
	if err := s.Validate(); err != nil {
		t.Errorf("good order: %v", err)
	}
}

// Groups named in any order or twice share a SHA; a spec without after
// or last keeps the SHA it had before they existed.
func TestOrderCanonical(t *testing.T) {
	base := func(after []string, l *Last) *Spec {
		return &Spec{Container: Container{Image: "demo:v1"}, Update: Update{After: after, Last: l}}
	}
	leader := &Last{Check: "leader"}
	runSHACases(t, []shaCase{
		{"any order", base([]string{"b", "a"}, nil), base([]string{"a", "b"}, nil), true},
		{"a group twice", base([]string{"a", "b", "a"}, nil), base([]string{"a", "b"}, nil), true},
		{"empty after is none", base([]string{}, nil), base(nil, nil), true},
		{"after is not none", base([]string{"a"}, nil), base(nil, nil), false},
		{"other groups", base([]string{"a"}, nil), base([]string{"b"}, nil), false},
		{"last is not none", base(nil, leader), base(nil, nil), false},
		{"another check", base(nil, leader), base(nil, &Last{Check: "raft-leader"}), false},
	})
	s := base([]string{"b", "a", "b"}, nil).WithDefaults()
	if !slices.Equal(s.Update.After, []string{"a", "b"}) {
		t.Errorf("normalised after = %q, want [a b]", s.Update.After)
	}
	c, err := base(nil, nil).Canonical()
	if err != nil || strings.Contains(string(c), "after") || strings.Contains(string(c), "last") {
		t.Errorf("a spec without after or last must not encode them: %s (%v)", c, err)
	}
}

// A group that names itself is refused with the line of update.after, in
// both formats; misspelt fields and a second last block are errors.
func TestOrderParseErrors(t *testing.T) {
	hcl := "name = \"workers\"\ncontainer {\n  image = \"x\"\n}\nupdate {\n  after = [\"managers\"]\n  last {\n    check = \"leader\"\n  }\n}\n"
	mustLoad(t, FormatHCL, hcl)
	cases := []struct {
		name, src string
		format    Format
		want      []string
	}{
		{"HCL names itself", strings.Replace(hcl, `["managers"]`, `["managers", "workers"]`, 1), FormatHCL,
			[]string{"g.hcl:6", "update.after[1]", `own group "workers"`}},
		{"HCL misspelt", strings.Replace(hcl, "check =", "chek =", 1), FormatHCL, []string{"g.hcl:8", "update.last.chek"}},
		{"HCL two last blocks", strings.Replace(hcl, "  }\n}", "  }\n  last {\n  }\n}", 1), FormatHCL, []string{"g.hcl:10", "last"}},
		{"HCL after a string", strings.Replace(hcl, `["managers"]`, `"managers"`, 1), FormatHCL, []string{"g.hcl:6", "after"}},
		{"HCL no check", strings.Replace(hcl, "    check = \"leader\"\n", "", 1), FormatHCL, []string{"update.last.check"}},
		{"JSON names itself", "{\"name\": \"workers\", \"container\": {\"image\": \"x\"},\n \"update\": {\n  \"after\": [\"workers\"]}}\n", FormatJSON,
			[]string{"g.json:3", "update.after[0]", `own group "workers"`}},
		{"JSON misspelt", "{\"container\": {\"image\": \"x\"},\n \"update\": {\"last\": {\n  \"checks\": \"leader\"}}}\n", FormatJSON,
			[]string{"g.json:3", "update.last.checks"}},
		{"JSON after a string", "{\"container\": {\"image\": \"x\"},\n \"update\": {\"after\": \"managers\"}}\n", FormatJSON,
			[]string{"g.json:2", "update.after"}},
		{"JSON empty last", "{\"container\": {\"image\": \"x\"},\n \"update\": {\"last\": {}}}\n", FormatJSON,
			[]string{"update.last.check"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := "g.hcl"
			if tc.format == FormatJSON {
				name = "g.json"
			}
			_, _, err := Load([]byte(tc.src), tc.format, name)
			if err == nil {
				t.Fatalf("loaded, want an error with %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// The golden pair parses to the same normalised order in both formats.
func TestOrderGoldenPair(t *testing.T) {
	h := parseGolden(t, "order.hcl", FormatHCL).WithDefaults()
	j := parseGolden(t, "order.json", FormatJSON).WithDefaults()
	for name, s := range map[string]Spec{"hcl": h, "json": j} {
		if !slices.Equal(s.Update.After, []string{"ingress", "managers"}) || s.Update.Last == nil || s.Update.Last.Check != "swarm-leader" {
			t.Errorf("%s: after = %q, last = %+v", name, s.Update.After, s.Update.Last)
		}
	}
}
