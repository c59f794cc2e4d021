package hashspec

import (
	"reflect"
	"testing"
)

// pinnedMinimalSHA guards the encoding independently of the golden files,
// so an `-update` run alone cannot silently move SHAs.
const pinnedMinimalSHA = "419f709bc0de99ccf0eb2888198ad38a58fa34d8c81438aafe59606b5c14c8c3"

func TestPinnedSHA(t *testing.T) {
	s := Spec{Container: Container{Image: "nginx:1.27"}}
	got, err := s.SHA()
	if err != nil {
		t.Fatal(err)
	}
	if got != pinnedMinimalSHA {
		t.Fatalf("SHA of the minimal spec changed: got %s, pinned %s", got, pinnedMinimalSHA)
	}
}

const webHCL = `
name = "web"
container {
  image  = "demo:v2"
  env    = { MODE = "prod", LEVEL = "info" }
  labels = { team = "core", tier = "web" }
  port {
    host      = 8080
    container = 8080
  }
}
`

func TestSHAEqual(t *testing.T) {
	cases := []struct {
		name   string
		format Format
		src    string
	}{
		{"json", FormatJSON, `{"name":"web","container":{"image":"demo:v2","env":{"MODE":"prod","LEVEL":"info"},"labels":{"team":"core","tier":"web"},"ports":[{"host":8080,"container":8080}]}}`},
		{"json other key order", FormatJSON, `{"container":{"labels":{"tier":"web","team":"core"},"ports":[{"container":8080,"host":8080}],"env":{"LEVEL":"info","MODE":"prod"},"image":"demo:v2"},"name":"web"}`},
		{"json defaults explicit", FormatJSON, `{"name":"web","container":{"image":"demo:v2","env":{"MODE":"prod","LEVEL":"info"},"labels":{"team":"core","tier":"web"},"ports":[{"host":8080,"container":8080,"protocol":"tcp","host_ip":""}],"restart":"unless-stopped","privileged":false,"cmd":[],"volumes":[]},` +
			`"update":{"max_parallel":1,"min_healthy_time":"10s","healthy_deadline":"5m0s","failure_action":"pause","max_failures":1,"order":"stop-first"}}`},
		{"hcl defaults explicit", FormatHCL, webHCL + "update {\n max_parallel = 1\n min_healthy_time = \"10000ms\"\n healthy_deadline = \"300s\"\n failure_action = \"pause\"\n max_failures = 1\n order = \"stop-first\"\n}\n"},
		{"hcl other order", FormatHCL, "container {\n port {\n container = 8080\n host = 8080\n protocol = \"tcp\"\n }\n labels = { tier = \"web\", team = \"core\" }\n env = { LEVEL = \"info\", MODE = \"prod\" }\n image = \"demo:v2\"\n}\nname = \"web\"\n"},
	}
	_, want := mustLoad(t, FormatHCL, webHCL)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, got := mustLoad(t, tc.format, tc.src); got != want {
				t.Fatalf("SHA %s, want %s (same spec as webHCL)", got, want)
			}
		})
	}
}

// Normalisations that make different spellings of one value hash equal.
func TestSHAEqualNormalised(t *testing.T) {
	base := `{"container":{"image":"x","ports":[{"host":1,"container":1,"host_ip":"::1"}],"volumes":[{"source":"/a","target":"/b"}]}}`
	_, want := mustLoad(t, FormatJSON, base)
	for name, src := range map[string]string{
		"ipv6 long form":  `{"container":{"image":"x","ports":[{"host":1,"container":1,"host_ip":"0:0::0:1"}],"volumes":[{"source":"/a","target":"/b"}]}}`,
		"trailing slash":  `{"container":{"image":"x","ports":[{"host":1,"container":1,"host_ip":"::1"}],"volumes":[{"source":"/a/","target":"/b/"}]}}`,
		"explicit bind":   `{"container":{"image":"x","ports":[{"host":1,"container":1,"host_ip":"::1"}],"volumes":[{"type":"bind","source":"/a","target":"/b"}]}}`,
		"empty maps null": `{"container":{"image":"x","env":{},"labels":null,"ports":[{"host":1,"container":1,"host_ip":"::1"}],"volumes":[{"source":"/a","target":"/b"}]}}`,
	} {
		t.Run(name, func(t *testing.T) {
			if _, got := mustLoad(t, FormatJSON, src); got != want {
				t.Fatalf("SHA %s, want %s", got, want)
			}
		})
	}
}

func TestSHADiffers(t *testing.T) {
	_, base := mustLoad(t, FormatHCL, webHCL)
	for name, src := range map[string]string{
		"image":       `{"name":"web","container":{"image":"demo:v3","env":{"MODE":"prod","LEVEL":"info"},"labels":{"team":"core","tier":"web"},"ports":[{"host":8080,"container":8080}]}}`,
		"env value":   `{"name":"web","container":{"image":"demo:v2","env":{"MODE":"dev","LEVEL":"info"},"labels":{"team":"core","tier":"web"},"ports":[{"host":8080,"container":8080}]}}`,
		"name":        `{"name":"web2","container":{"image":"demo:v2","env":{"MODE":"prod","LEVEL":"info"},"labels":{"team":"core","tier":"web"},"ports":[{"host":8080,"container":8080}]}}`,
		"update knob": `{"name":"web","container":{"image":"demo:v2","env":{"MODE":"prod","LEVEL":"info"},"labels":{"team":"core","tier":"web"},"ports":[{"host":8080,"container":8080}]},"update":{"max_parallel":2}}`,
		"protocol":    `{"name":"web","container":{"image":"demo:v2","env":{"MODE":"prod","LEVEL":"info"},"labels":{"team":"core","tier":"web"},"ports":[{"host":8080,"container":8080,"protocol":"udp"}]}}`,
	} {
		t.Run(name, func(t *testing.T) {
			if _, got := mustLoad(t, FormatJSON, src); got == base {
				t.Fatalf("a different spec must hash differently, both %s", got)
			}
		})
	}
}

// JSON and HCL of one spec must decode to identical structs, not just
// identical hashes, since other packages use the structs.
func TestJSONAndHCLDecodeEqual(t *testing.T) {
	for _, stem := range []string{"web", "minimal"} {
		j := parseGolden(t, stem+".json", FormatJSON)
		h := parseGolden(t, stem+".hcl", FormatHCL)
		jd, hd := j.WithDefaults(), h.WithDefaults()
		if !reflect.DeepEqual(jd, hd) {
			t.Errorf("%s: defaulted specs differ:\njson %+v\nhcl  %+v", stem, jd, hd)
		}
	}
}

func TestWithDefaultsDoesNotAlias(t *testing.T) {
	s := validSpec()
	d := s.WithDefaults()
	d.Container.Env["MODE"] = "changed"
	d.Container.Cmd[0] = "changed"
	d.Container.Healthcheck.Retries = 99
	if s.Container.Env["MODE"] != "prod" || s.Container.Cmd[0] != "serve" || s.Container.Healthcheck.Retries == 99 {
		t.Fatal("WithDefaults must deep-copy; mutating the copy changed the original")
	}
}
