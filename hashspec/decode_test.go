package hashspec

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type decodeCase struct {
	name   string
	format Format
	src    string
	field  string // the field the error must name
	want   string // substring of the error text (file, line, message)
}

func runDecodeCases(t *testing.T, cases []decodeCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.src), tc.format, "spec."+tc.format.String())
			if err == nil {
				t.Fatal("want a decode error, got nil")
			}
			wantField(t, err, tc.field)
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

func TestDecodeJSONErrors(t *testing.T) {
	runDecodeCases(t, []decodeCase{
		{"unknown field", FormatJSON, "{\n \"container\": {\n  \"bogus\": 1}}", "container.bogus", "spec.json:3: container.bogus: unknown field"},
		{"unknown top field", FormatJSON, `{"nmae": "web"}`, "nmae", "unknown field"},
		{"case mismatch", FormatJSON, `{"container": {"Image": "x"}}`, "container.Image", "unknown field"},
		{"duplicate key", FormatJSON, `{"name": "a", "name": "b"}`, "name", "duplicate key"},
		{"duplicate env key", FormatJSON, `{"container": {"env": {"A": "1", "A": "2"}}}`, "container.env.A", "duplicate key"},
		{"string for int", FormatJSON, `{"update": {"max_parallel": "2"}}`, "update.max_parallel", `must be a number, or a whole percentage from "1%" to "100%" such as "25%", got "2"`},
		{"float for int", FormatJSON, `{"update": {"max_parallel": 1.5}}`, "update.max_parallel", "must be an integer, got 1.5"},
		{"int overflow", FormatJSON, `{"update": {"max_parallel": 99999999999999999999}}`, "update.max_parallel", "must be an integer"},
		{"string for list", FormatJSON, `{"container": {"cmd": "serve"}}`, "container.cmd", "must be an array"},
		{"number in list", FormatJSON, `{"container": {"cmd": ["a", 1]}}`, "container.cmd[1]", "must be a string"},
		{"null in list", FormatJSON, `{"container": {"cmd": [null]}}`, "container.cmd[0]", "must not be null"},
		{"null env value", FormatJSON, `{"container": {"env": {"A": null}}}`, "container.env.A", "must not be null"},
		{"unknown port field", FormatJSON, `{"container": {"ports": [{"container": 1}, {"hostport": 1}]}}`, "container.ports[1].hostport", "unknown field"},
		{"bool as string", FormatJSON, `{"container": {"privileged": "yes"}}`, "container.privileged", "must be true or false"},
		{"duration garbage", FormatJSON, `{"update": {"min_healthy_time": "abc"}}`, "update.min_healthy_time", `invalid duration "abc"`},
		{"duration number", FormatJSON, `{"update": {"min_healthy_time": 10}}`, "update.min_healthy_time", "must be a duration string"},
		{"duration no unit", FormatJSON, `{"container": {"healthcheck": {"interval": "5"}}}`, "container.healthcheck.interval", "invalid duration"},
		{"top level array", FormatJSON, `[]`, "", "top level must be a JSON object"},
		{"syntax error line", FormatJSON, "{\n\"name\": \"a\",\n}", "", "spec.json:3: syntax error"},
		{"truncated", FormatJSON, `{"container": {`, "", "unexpected end of input"},
		{"trailing data", FormatJSON, `{} {}`, "", "unexpected data after"},
		{"empty", FormatJSON, ``, "", "empty input"},
		{"invalid utf8", FormatJSON, "{\"name\": \"\xff\"}", "", "not valid UTF-8"},
	})
}

func TestDecodeHCLErrors(t *testing.T) {
	runDecodeCases(t, []decodeCase{
		{"unknown attribute", FormatHCL, "container {\n  image = \"x\"\n  bogus = 1\n}", "container.bogus", "spec.hcl:3: container.bogus: unknown field"},
		{"typo suggestion", FormatHCL, "container {\n  imag = \"x\"\n}", "container.imag", `Did you mean "image"?`},
		{"unknown block", FormatHCL, "containers {\n}", "containers", "unknown field"},
		{"unknown port attr", FormatHCL, "container {\n port {\n container = 1\n }\n port {\n hostport = 1\n }\n}", "container.ports[1].hostport", "spec.hcl:6:"},
		{"wrong type", FormatHCL, "update {\n max_parallel = \"two\"\n}", "update.max_parallel", "spec.hcl:2:"},
		{"list for string", FormatHCL, "container {\n image = [\"x\"]\n}", "container.image", "string required"},
		{"duplicate attribute", FormatHCL, "name = \"a\"\nname = \"b\"\n", "name", "spec.hcl:2:"},
		{"duplicate block", FormatHCL, "update {\n}\nupdate {\n}\n", "update", "spec.hcl:3:"},
		{"variables rejected", FormatHCL, "name = var.x\n", "name", "Variables not allowed"},
		{"duration garbage", FormatHCL, "update {\n\n  min_healthy_time = \"abc\"\n}", "update.min_healthy_time", `spec.hcl:3: update.min_healthy_time: invalid duration "abc"`},
		{"healthcheck duration", FormatHCL, "container {\n healthcheck {\n  timeout = \"5 s\"\n }\n}", "container.healthcheck.timeout", "invalid duration"},
		{"syntax error", FormatHCL, "container {\n image = \n}", "container", "spec.hcl:2"},
		{"duplicate nested attribute", FormatHCL, "container {\n image = \"a\"\n image = \"b\"\n}", "container.image", "spec.hcl:3"},
		{"duplicate env key", FormatHCL, "container {\n env = {\n  A = \"1\"\n  A = \"2\"\n }\n}", "container.env.A", "spec.hcl:4: container.env.A: duplicate key"},
		{"duplicate label key, quoted once", FormatHCL, "container {\n labels = { team = \"a\", \"team\" = \"b\" }\n}", "container.labels.team", "duplicate key"},
		{"decomposed text", FormatHCL, "container {\n image = \"x\"\n env = { A = \"cafe\u0301\" }\n}", "container.env", "spec.hcl:3"},
		{"decomposed escape", FormatHCL, "container {\n env = { A = \"cafe\\u0301\" }\n}", "container.env", "normalization form C"},
		{"decomposed bind source", FormatHCL, "container {\n volume {\n  type = \"bind\"\n  source = \"/srv/cafe\u0301\"\n }\n}",
			"container.volumes[0].source", "spec.hcl:4"},
	})
}

// One spec in JSON and in HCL means the same in both: text that HCL would
// compose to NFC is refused by both, with the field named, and its
// composed form is accepted by both with one SHA.
func TestFormatsAgreeOnUnicodeForms(t *testing.T) {
	spec := func(format Format, source string) []byte {
		if format == FormatJSON {
			return []byte(`{"container": {"image": "x", "volumes": [{"type": "bind", "source": "` + source + `", "target": "/d"}]}}`)
		}
		return []byte("container {\n image = \"x\"\n volume {\n  type = \"bind\"\n  source = \"" + source + "\"\n  target = \"/d\"\n }\n}\n")
	}
	const nfd, nfc = "/srv/cafe\u0301", "/srv/caf\u00e9"
	shas := map[Format]string{}
	for _, format := range []Format{FormatJSON, FormatHCL} {
		t.Run(format.String(), func(t *testing.T) {
			_, _, err := Load(spec(format, nfd), format, "spec")
			if err == nil || !strings.Contains(err.Error(), "normalization form C") {
				t.Fatalf("decomposed bind source: Load = %v, want it refused", err)
			}
			wantField(t, err, "container.volumes[0].source")
			_, sha, err := Load(spec(format, nfc), format, "spec")
			if err != nil {
				t.Fatalf("composed bind source: %v", err)
			}
			shas[format] = sha
		})
	}
	if shas[FormatJSON] != shas[FormatHCL] {
		t.Fatalf("one spec, two SHAs: %v", shas)
	}
}

// Explicit zeros where the default is non-zero are mistakes; they must
// fail validation rather than be replaced by the default.
func TestExplicitZeroRejected(t *testing.T) {
	cases := []struct {
		name, field string
		format      Format
		src         string
	}{
		{"json max_parallel", "update.max_parallel", FormatJSON, `{"container":{"image":"x"},"update":{"max_parallel":0}}`},
		{"json max_failures", "update.max_failures", FormatJSON, `{"container":{"image":"x"},"update":{"max_failures":0}}`},
		{"json min_healthy_time", "update.min_healthy_time", FormatJSON, `{"container":{"image":"x"},"update":{"min_healthy_time":"0s"}}`},
		{"json healthy_deadline", "update.healthy_deadline", FormatJSON, `{"container":{"image":"x"},"update":{"healthy_deadline":"0"}}`},
		{"json interval", "container.healthcheck.interval", FormatJSON, `{"container":{"image":"x","healthcheck":{"test":["NONE"],"interval":"0s"}}}`},
		{"json retries", "container.healthcheck.retries", FormatJSON, `{"container":{"image":"x","healthcheck":{"test":["NONE"],"retries":0}}}`},
		{"json negative", "update.max_parallel", FormatJSON, `{"container":{"image":"x"},"update":{"max_parallel":-1}}`},
		{"json negative duration", "update.min_healthy_time", FormatJSON, `{"container":{"image":"x"},"update":{"min_healthy_time":"-5s"}}`},
		{"hcl max_parallel", "update.max_parallel", FormatHCL, "container {\n image = \"x\"\n}\nupdate {\n max_parallel = 0\n}"},
		{"hcl timeout", "container.healthcheck.timeout", FormatHCL, "container {\n image = \"x\"\n healthcheck {\n  test = [\"NONE\"]\n  timeout = \"0s\"\n }\n}"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Load([]byte(tc.src), tc.format, "spec")
			wantOnlyField(t, err, tc.field)
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("want a *ValidationError, got %T", err)
			}
		})
	}
}

// null means "not set" in JSON, so it must get the default, not count
// as an explicit zero.
func TestJSONNullIsOmitted(t *testing.T) {
	_, a := mustLoad(t, FormatJSON, `{"container":{"image":"x","cmd":null},"update":{"max_parallel":null}}`)
	_, b := mustLoad(t, FormatJSON, `{"container":{"image":"x"}}`)
	if a != b {
		t.Fatalf("null and omitted hash differently: %s vs %s", a, b)
	}
}

func TestSizeLimit(t *testing.T) {
	// Garbage that would be a syntax error if it reached a parser: the
	// error must be the size limit, proving the check runs first.
	big := bytes.Repeat([]byte("{"), 10<<20)
	for _, f := range []Format{FormatJSON, FormatHCL} {
		t.Run(f.String(), func(t *testing.T) {
			_, err := Parse(big, f, "big")
			if err == nil || !strings.Contains(err.Error(), "limit") {
				t.Fatalf("want size limit error, got %v", err)
			}
		})
	}
	t.Run("file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "big.json")
		if err := os.WriteFile(path, big, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := ParseFile(path); err == nil || !strings.Contains(err.Error(), "limit") {
			t.Fatalf("want size limit error, got %v", err)
		}
	})
	t.Run("exactly at limit is parsed", func(t *testing.T) {
		at := append([]byte(`{"name":"web"}`), bytes.Repeat([]byte(" "), MaxSpecBytes-14)...)
		if _, err := Parse(at, FormatJSON, "at"); err != nil {
			t.Fatalf("a spec of exactly MaxSpecBytes must parse: %v", err)
		}
	})
}

func TestFormatFromPath(t *testing.T) {
	for path, want := range map[string]Format{"a.json": FormatJSON, "x/B.JSON": FormatJSON, "c.hcl": FormatHCL} {
		if got, err := FormatFromPath(path); err != nil || got != want {
			t.Errorf("FormatFromPath(%q) = %v, %v; want %v", path, got, err, want)
		}
	}
	for _, path := range []string{"a.yaml", "a", "a.json.bak"} {
		if _, err := FormatFromPath(path); err == nil {
			t.Errorf("FormatFromPath(%q): want error", path)
		}
	}
}

func TestParseFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "web.hcl")
	if err := os.WriteFile(path, []byte("container {\n  image = \"demo:v2\"\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := ParseFile(path)
	if err != nil || s.Container.Image != "demo:v2" {
		t.Fatalf("ParseFile = %+v, %v", s, err)
	}
	if _, err := ParseFile(filepath.Join(dir, "missing.json")); err == nil {
		t.Fatal("want error for a missing file")
	}
}
