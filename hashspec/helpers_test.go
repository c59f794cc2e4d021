package hashspec

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// validSpec returns a defaulted spec that passes Validate; validation
// cases each break exactly one rule of it so the error list has exactly
// one entry and a stray second problem cannot hide behind the first.
func validSpec() Spec {
	s := Spec{
		Name: "web",
		Container: Container{
			Image:   "demo:v2",
			Cmd:     []string{"serve"},
			Env:     map[string]string{"MODE": "prod"},
			Labels:  map[string]string{"team": "core"},
			Ports:   []Port{{Host: 8080, Container: 8080}},
			Volumes: []Volume{{Source: "/srv/data", Target: "/data"}},
			Healthcheck: &Healthcheck{
				Test: []string{"CMD", "/demo", "health"},
			},
		},
	}
	return s.WithDefaults()
}

// fieldsOf lists the Field of every FieldError/ParseError inside err,
// following both single and multi-error wrapping.
func fieldsOf(err error) []string {
	var out []string
	switch e := err.(type) {
	case nil:
		return nil
	case *FieldError:
		return []string{e.Field}
	case *ParseError:
		return []string{e.Field}
	case interface{ Unwrap() []error }:
		for _, inner := range e.Unwrap() {
			out = append(out, fieldsOf(inner)...)
		}
		return out
	}
	return fieldsOf(errors.Unwrap(err))
}

// wantOnlyField fails unless err reports exactly one problem, on field.
func wantOnlyField(t *testing.T, err error, field string) {
	t.Helper()
	got := fieldsOf(err)
	if len(got) != 1 || got[0] != field {
		t.Fatalf("want one error on %q, got fields %q; err: %v", field, got, err)
	}
}

// wantField fails unless err reports a problem on field.
func wantField(t *testing.T, err error, field string) {
	t.Helper()
	if !slices.Contains(fieldsOf(err), field) {
		t.Fatalf("want an error on %q, got fields %q; err: %v", field, fieldsOf(err), err)
	}
}

func dur(s string) Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		panic(err)
	}
	return Duration(d)
}

func mustLoad(t *testing.T, format Format, src string) (*Spec, string) {
	t.Helper()
	s, sha, err := Load([]byte(src), format, "test."+format.String())
	if err != nil {
		t.Fatalf("Load: %v\ninput:\n%s", err, src)
	}
	return s, sha
}

// wantHashAsNone wants the JSON spec js, image demo:v1 and fields set to
// their zero (what), to have the SHA of the spec that leaves them out:
// omitempty keeps every SHA from before the field.
func wantHashAsNone(t *testing.T, what, js string) {
	t.Helper()
	_, explicit := mustLoad(t, FormatJSON, js)
	_, omitted := mustLoad(t, FormatHCL, "container {\n  image = \"demo:v1\"\n}\n")
	if explicit != omitted {
		t.Errorf("%s must hash as none: %s vs %s", what, explicit, omitted)
	}
}

// shaCase says whether specs a and b share a SHA.
type shaCase struct {
	name  string
	a, b  *Spec
	equal bool
}

func runSHACases(t *testing.T, cases []shaCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, err := tc.a.SHA()
			if err != nil {
				t.Fatal(err)
			}
			b, err := tc.b.SHA()
			if err != nil {
				t.Fatal(err)
			}
			if (a == b) != tc.equal {
				t.Errorf("SHAs equal = %v, want %v", a == b, tc.equal)
			}
		})
	}
}

// updateHCL is the HCL source of a spec of image x whose update block
// holds body, which begins on line 5.
func updateHCL(body string) string {
	return "container {\n  image = \"x\"\n}\nupdate {\n" + body + "}\n"
}

// updateJSON is the JSON source of a spec of image x whose "update" is
// update, which begins on line 2.
func updateJSON(update string) string {
	return "{\"container\": {\"image\": \"x\"},\n \"update\": " + update + "}\n"
}

// parseErrorCase is a spec that must not load, and what its error says.
type parseErrorCase struct {
	name, src string
	format    Format
	want      []string // each a part of the error
}

// runParseErrors loads each case's src as the file g.hcl or g.json, by
// its format, and wants an error that holds every part of want.
func runParseErrors(t *testing.T, cases []parseErrorCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Load([]byte(tc.src), tc.format, "g."+tc.format.String())
			if err == nil {
				t.Fatal("want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("want %q in the error, got %v", w, err)
				}
			}
		})
	}
}
