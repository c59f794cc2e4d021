package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// parseWith parses args with a config file holding body, as main would.
func parseWith(t *testing.T, body string, args ...string) (*CLI, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rollagent.json")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	var cli CLI
	var out bytes.Buffer
	p, err := newParser(&cli, &out, &out)
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Parse(append(args, "--config", path))
	return &cli, err
}

func TestConfigFileSetsRunFlags(t *testing.T) {
	t.Setenv("ROLLAGENT_NODE", "from-env")
	cli, err := parseWith(t, `{
		"consul_addr": "10.0.0.1:8500",
		"group": "web",
		"node": "from-file",
		"session-ttl": "5s",
		"allow_bind": ["/srv/data", "/var/log"],
		"label": {"team": "edge"},
		"allow_privileged": true
	}`, "run", "--session-ttl=4s")
	if err != nil {
		t.Fatal(err)
	}
	r := cli.Run
	for _, tt := range []struct{ what, got, want string }{
		{"file value", cli.ConsulAddr, "10.0.0.1:8500"},
		{"file value", r.Group, "web"},
		{"environment wins over file", r.Node, "from-env"},
		{"command line wins over file", r.SessionTTL.String(), (4 * time.Second).String()},
		{"list", strings.Join(r.AllowBind, ","), "/srv/data,/var/log"},
		{"map", r.Label["team"], "edge"},
	} {
		if tt.got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.what, tt.got, tt.want)
		}
	}
	if !r.AllowPrivileged {
		t.Error("allow_privileged from the file was not applied")
	}
}

func TestConfigFileErrorsNameTheCause(t *testing.T) {
	tests := []struct {
		name, body string
		want       []string
	}{
		{"unknown key", `{"group": "web", "max_paralel": 2, "nodde": "x"}`,
			[]string{"rollagent.json", "unknown setting(s) max_paralel, nodde"}},
		{"not JSON", `group = "web"`, []string{"rollagent.json", "not a JSON object"}},
		{"wrong type", `{"group": "web", "session_ttl": "soon"}`, []string{"session-ttl"}},
		{"bad enum", `{"group": "web", "runtime": "podman"}`, []string{"runtime", "podman"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseWith(t, tt.body, "run")
			if err == nil {
				t.Fatal("parse succeeded")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}
