package hashspec

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func addGoldenSeeds(f *testing.F, ext string) {
	f.Helper()
	for _, path := range goldenSpecs(f) {
		if filepath.Ext(path) != ext {
			continue
		}
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
}

func FuzzParseJSON(f *testing.F) {
	addGoldenSeeds(f, ".json")
	f.Add([]byte(`{"container":{"image":"x","env":{"A":"\u00e9"},"labels":{"k":"v\n"}}}`))
	f.Add([]byte(`{"container":{"image":"x"},"update":{"drain":{"services":["b","a","a"],"delay":"0s"}}}`))
	f.Add([]byte(`{"container":{"image":"x"},"update":{"max_parallel":"100%","max_failures":"1%"}}`))
	f.Add([]byte(`{"container":{"image":"x"},"update":{"max_parallel":"25.5%","max_failures":"0%"}}`))
	f.Add([]byte(`{"name":"w","container":{"image":"x"},"update":{"after":["m","a","m"],"last":{"check":"leader"}}}`))
	f.Add([]byte(`{"container":{"image":"x"},"update":{"max_parallel":2,"max_parallel_per":{"key":"zone","max":1}}}`))
	f.Add([]byte(`{"container":{"image":"x"},"update":{"canary":1,"canary_healthy_time":"90s","auto_promote":true}}`))
	f.Add([]byte(`{"container":{"image":"x"},"update":{"canary":0,"auto_promote":false}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkRoundTrip(t, data, FormatJSON)
	})
}

func FuzzParseHCL(f *testing.F) {
	addGoldenSeeds(f, ".hcl")
	f.Add([]byte("container {\n image = \"x\"\n labels = { \"a.b\" = \"c\\u00e9\" }\n}\n"))
	f.Add([]byte("container {\n image = \"x\"\n}\nupdate {\n canary = 3\n canary_healthy_time = \"1m30s\"\n auto_promote = true\n}\n"))
	f.Add([]byte("container {\n image = \"x\"\n}\nupdate {\n drain {\n  services = [\"b\", \"a\", \"a\"]\n  delay = \"1m0s\"\n }\n}\n"))
	f.Add([]byte("container {\n image = \"x\"\n}\nupdate {\n max_parallel = \"50%\"\n max_failures = \"3\"\n}\n"))
	f.Add([]byte("container {\n image = \"x\"\n}\nupdate {\n max_parallel = 2.5\n max_failures = \"101%\"\n}\n"))
	f.Add([]byte("name = \"w\"\ncontainer {\n image = \"x\"\n}\nupdate {\n after = [\"m\", \"a\", \"m\"]\n last {\n  check = \"leader\"\n }\n}\n"))
	f.Add([]byte("container {\n image = \"x\"\n}\nupdate {\n max_parallel_per {\n  key = \"zone\"\n  max = 1\n }\n}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkRoundTrip(t, data, FormatHCL)
	})
}

// checkRoundTrip is the property both fuzzers test: for any input that
// parses and validates, the canonical form re-parses (as JSON) to the
// same defaulted spec, re-encodes to the same bytes, and keeps its SHA.
// A failure means two encodings of one spec, i.e. needless rollouts, or
// a lossy encoding, i.e. missed ones.
func checkRoundTrip(t *testing.T, data []byte, format Format) {
	s, err := Parse(data, format, "fuzz")
	if err != nil {
		return
	}
	c1, err := s.Canonical()
	if err != nil {
		return
	}
	if !json.Valid(c1) {
		t.Fatalf("canonical is not valid JSON: %q", c1)
	}
	d1 := s.WithDefaults()
	if again := d1.WithDefaults(); !reflect.DeepEqual(d1, again) {
		t.Fatalf("WithDefaults is not idempotent:\n%+v\n%+v", d1, again)
	}
	s2, err := Parse(c1, FormatJSON, "canonical.json")
	if err != nil {
		t.Fatalf("canonical form does not parse: %v\n%s", err, c1)
	}
	c2, err := s2.Canonical()
	if err != nil {
		t.Fatalf("canonical form does not validate: %v\n%s", err, c1)
	}
	if !bytes.Equal(c1, c2) {
		t.Fatalf("canonical not stable:\n%s\n%s", c1, c2)
	}
	if d2 := s2.WithDefaults(); !reflect.DeepEqual(d1, d2) {
		t.Fatalf("canonical round trip changed the spec:\n%+v\n%+v", d1, d2)
	}
	sha1, err1 := s.SHA()
	sha2, err2 := s2.SHA()
	_, sha3, err3 := Load(data, format, "fuzz")
	if err1 != nil || err2 != nil || err3 != nil || sha1 != sha2 || sha1 != sha3 {
		t.Fatalf("SHA not stable: %s %s %s (%v %v %v)", sha1, sha2, sha3, err1, err2, err3)
	}
}
