package hashspec

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// Our writer must agree with encoding/json (minus HTML escaping) on
// ordinary specs: that keeps "canonical JSON" an honest description and
// catches a writer bug in field order, omitempty or escaping.
func TestCanonicalMatchesEncodingJSON(t *testing.T) {
	for _, path := range goldenSpecs(t) {
		t.Run(path, func(t *testing.T) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			format, _ := FormatFromPath(path)
			s, _, err := Load(data, format, path)
			if err != nil {
				t.Fatal(err)
			}
			ours, err := s.Canonical()
			if err != nil {
				t.Fatal(err)
			}
			var std bytes.Buffer
			enc := json.NewEncoder(&std)
			enc.SetEscapeHTML(false)
			if err := enc.Encode(s); err != nil {
				t.Fatal(err)
			}
			if got, want := string(ours), strings.TrimSuffix(std.String(), "\n"); got != want {
				t.Fatalf("canonical differs from encoding/json:\nours %s\nstd  %s", got, want)
			}
		})
	}
}

func TestCanonicalRejectsInvalid(t *testing.T) {
	s := Spec{}
	if _, err := s.Canonical(); err == nil {
		t.Fatal("an invalid spec must have no canonical form")
	}
	if _, err := s.SHA(); err == nil {
		t.Fatal("an invalid spec must have no SHA")
	}
}

func TestWriteStringEscapes(t *testing.T) {
	cases := map[string]string{
		`plain`:        `"plain"`,
		"q\"b\\":       `"q\"b\\"`,
		"n\nr\rt\t":    `"n\nr\rt\t"`,
		"\x01\x1f\x7f": "\"\\u0001\\u001f\x7f\"",
		"<&> é 世":      `"<&> é 世"`,
		"\u2028":       "\"\u2028\"",
	}
	for in, want := range cases {
		var b bytes.Buffer
		writeString(&b, in)
		if b.String() != want {
			t.Errorf("writeString(%q) = %s, want %s", in, b.String(), want)
		}
		var back string
		if err := json.Unmarshal(b.Bytes(), &back); err != nil || back != in {
			t.Errorf("writeString(%q) does not round-trip through JSON: %q, %v", in, back, err)
		}
	}
}

func TestDurationJSON(t *testing.T) {
	b, err := json.Marshal(Duration(90_000_000_000))
	if err != nil || string(b) != `"1m30s"` {
		t.Fatalf("Marshal = %s, %v", b, err)
	}
	var d Duration
	if err := json.Unmarshal([]byte(`"1m30s"`), &d); err != nil || d.Std().Seconds() != 90 {
		t.Fatalf("Unmarshal = %v, %v", d, err)
	}
	for _, bad := range []string{`10`, `"abc"`, `true`} {
		if err := json.Unmarshal([]byte(bad), &d); err == nil {
			t.Errorf("Unmarshal(%s): want error", bad)
		}
	}
}
