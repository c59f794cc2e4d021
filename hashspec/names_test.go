package hashspec

import (
	"strings"
	"testing"
)

func TestValidateName(t *testing.T) {
	cases := []struct {
		name    string
		wantErr string // substring; "" means valid
	}{
		{"web", ""},
		{"a", ""},
		{"Web-01.prod_b", ""},
		{strings.Repeat("a", 63), ""},
		{"", "must not be empty"},
		{strings.Repeat("a", 64), "at most 63 characters, got 64"},
		{strings.Repeat("x", 300), "at most 63 characters, got 300"},
		{"../x", `must not contain ".."`},
		{"a..b", `must not contain ".."`},
		{"a/b", `invalid character '/'`},
		{"a b", `invalid character ' '`},
		{"a\x00b", `invalid character '\x00'`},
		{"web.", "must end with a letter or digit"},
		{"-web", "must start with a letter or digit"},
		{".hidden", "must start with a letter or digit"},
		// Cyrillic "е" (U+0435): looks like "web" but must not pass for it.
		{"w\u0435b", "ASCII only; found 'е' (U+0435) at byte 1"},
		{"\xff", "ASCII only"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateName(tc.name)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("want error containing %q, got %v", tc.wantErr, err)
			}
		})
	}
}

// A 300-byte name must not be echoed whole into logs.
func TestValidateNameShortensLongInput(t *testing.T) {
	err := ValidateName(strings.Repeat("x", 300))
	if err == nil || len(err.Error()) > 200 {
		t.Fatalf("want a short error, got %d bytes: %v", len(err.Error()), err)
	}
}
