package hashspec

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

type hostileInput struct {
	name   string
	format Format
	data   []byte
}

// hostileInputs are just under MaxSpecBytes: the CLI and any API that
// accepts specs parse untrusted input.
func hostileInputs() []hostileInput {
	n := MaxSpecBytes / 16
	return []hostileInput{
		{"json many unknown keys", FormatJSON, []byte("{" + strings.Repeat("\"k\":1,\n", n)[:n*7-2] + "}")},
		{"json deep nesting", FormatJSON, bytes.Repeat([]byte("["), MaxSpecBytes)},
		{"json many bad ports", FormatJSON, []byte(`{"container":{"ports":[` + strings.Repeat(`{"host":"x"},`, n/2)[:n/2*13-1] + `]}}`)},
		{"hcl many unknown attrs", FormatHCL, []byte(strings.Repeat("k = 1\n", n/2))},
		{"hcl many duplicate attrs", FormatHCL, []byte("container {\n" + strings.Repeat("image = \"x\"\n", n/2) + "}\n")},
		// Before guardHCL each of these overflowed the stack inside
		// hclsyntax (a fatal error that no recover can catch), except the
		// directives, which took over 20s.
		{"hcl deep brackets", FormatHCL, []byte("name = " + strings.Repeat("[", MaxSpecBytes/2))},
		{"hcl deep parens", FormatHCL, []byte("name = " + strings.Repeat("(", MaxSpecBytes/2))},
		{"hcl deep objects", FormatHCL, []byte("name = " + strings.Repeat("{a=", MaxSpecBytes/4))},
		{"hcl deep blocks", FormatHCL, []byte(strings.Repeat("a {\n", MaxSpecBytes/4))},
		{"hcl deep templates", FormatHCL, []byte("name = " + strings.Repeat("\"${", MaxSpecBytes/4))},
		{"hcl unary chain", FormatHCL, []byte("name = " + strings.Repeat("-", MaxSpecBytes/2) + "1")},
		{"hcl unary chain over newlines", FormatHCL, []byte("name = [" + strings.Repeat("!\n", MaxSpecBytes/4) + "true]")},
		{"hcl nested if directives", FormatHCL, []byte("name = \"" + strings.Repeat("%{if true}", MaxSpecBytes/16) + "\"")},
	}
}

// Hostile inputs must fail with a bounded error and must not crash the
// process (several overflowed hclsyntax's stack before guardHCL). How fast
// they fail is BenchmarkHostileInputs' to measure, not a test's.
func TestHostileInputsFailCleanly(t *testing.T) {
	for _, tc := range hostileInputs() {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.data) > MaxSpecBytes {
				t.Fatalf("test input %d bytes exceeds the limit", len(tc.data))
			}
			_, err := Parse(tc.data, tc.format, "big")
			if err == nil {
				t.Fatal("want an error")
			}
			if len(err.Error()) > 8192 {
				t.Errorf("error is %d bytes; want it capped", len(err.Error()))
			}
		})
	}
}

// BenchmarkHostileInputs reports each hostile input's parse time as a
// multiple of parsing a valid spec of ordinary size in the same run.
func BenchmarkHostileInputs(b *testing.B) {
	valid := []byte(`{"name":"web","container":{"image":"demo:v1","env":{"A":"1"}},"update":{"max_parallel":2}}`)
	const baseRuns = 2000
	start := time.Now()
	for i := 0; i < baseRuns; i++ {
		if _, err := Parse(valid, FormatJSON, "valid"); err != nil {
			b.Fatal(err)
		}
	}
	base := float64(time.Since(start)) / baseRuns
	for _, tc := range hostileInputs() {
		b.Run(tc.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				_, _ = Parse(tc.data, tc.format, "big")
			}
			b.ReportMetric(float64(b.Elapsed())/float64(b.N)/base, "x-valid-spec")
		})
	}
}
