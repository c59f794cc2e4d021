package main

import (
	"strings"
	"testing"
)

// The difference is over the canonical forms: defaults and spellings that
// give one SHA show nothing; each leaf that differs is one line.
func TestSpecDiff(t *testing.T) {
	const base = `{"name":"web","container":{"image":"web:1","cmd":["serve"]},"update":{"max_parallel":1}}`
	tests := []struct {
		name, old, new string
		want           []string
		policyOnly     bool
	}{
		{"defaults spelt out", base, `{"name":"web","container":{"image":"web:1","cmd":["serve"]},"update":{"max_parallel":1,"order":"stop-first","min_healthy_time":"10s"}}`, nil, false},
		{"image", base, strings.Replace(base, "web:1", "web:2", 1), []string{"container.image: web:1 → web:2"}, false},
		{"policy", base, strings.Replace(base, `"max_parallel":1`, `"max_parallel":2`, 1), []string{"update.max_parallel: 1 → 2"}, true},
		{"a count to a percentage", base, strings.Replace(base, `"max_parallel":1`, `"max_parallel":"25%"`, 1), []string{"update.max_parallel: 1 → 25%"}, true},
		{"list grows", base, strings.Replace(base, `["serve"]`, `["serve","--fast"]`, 1), []string{"container.cmd[1]: --fast (added)"}, false},
		{"field removed", base, strings.Replace(base, `,"cmd":["serve"]`, "", 1), []string{"container.cmd[0]: serve (removed)"}, false},
		{"block added leaf by leaf", base, strings.Replace(base, `"max_parallel":1`, `"max_parallel":1,"drain":{"services":["web"],"delay":"5s"}`, 1),
			[]string{"update.drain.delay: 5s (added)", "update.drain.services[0]: web (added)"}, true},
		{"a string that needs quotes", base, strings.Replace(base, `["serve"]`, `["serve it"]`, 1), []string{`container.cmd[0]: serve → "serve it"`}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := specDiff(jsonSpec(t, tt.old), jsonSpec(t, tt.new))
			if err != nil {
				t.Fatal(err)
			}
			var lines []string
			for _, c := range got {
				lines = append(lines, c.String())
			}
			if strings.Join(lines, "\n") != strings.Join(tt.want, "\n") || policyOnly(got) != tt.policyOnly {
				t.Fatalf("diff:\n%s\npolicy only %v; want:\n%s\npolicy only %v", strings.Join(lines, "\n"), policyOnly(got), strings.Join(tt.want, "\n"), tt.policyOnly)
			}
		})
	}
}
