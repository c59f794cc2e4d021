package hashspec

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// Hostile inputs just under MaxSpecBytes must fail fast with a bounded
// error: the CLI and any API that accepts specs parse untrusted input.
func TestPathologicalInputsAreFast(t *testing.T) {
	n := MaxSpecBytes / 16
	cases := []struct {
		name   string
		format Format
		data   []byte
	}{
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
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.data) > MaxSpecBytes {
				t.Fatalf("test input %d bytes exceeds the limit", len(tc.data))
			}
			start := time.Now()
			_, err := Parse(tc.data, tc.format, "big")
			if err == nil {
				t.Fatal("want an error")
			}
			if len(err.Error()) > 8192 {
				t.Errorf("error is %d bytes; want it capped", len(err.Error()))
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("took %v", d)
			}
		})
	}
}
