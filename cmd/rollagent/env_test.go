package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/alecthomas/kong"
)

// unsetenv removes k for the test and restores it after.
func unsetenv(t *testing.T, k string) {
	t.Helper()
	t.Setenv(k, "")
	os.Unsetenv(k)
}

// flagRow is one row of the README's table of flags.
type flagRow struct{ env, def, commands string }

// kongFlags is the table the README must show, built from the parser's
// model: every flag of every command, keyed by its name.
func kongFlags(t *testing.T) map[string]flagRow {
	t.Helper()
	var cli CLI
	var out bytes.Buffer
	p, err := newParser(&cli, &out, &out)
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]flagRow{}
	var walk func(n *kong.Node, cmd string)
	walk = func(n *kong.Node, cmd string) {
		for _, f := range n.Flags {
			if f.Name == "help" {
				continue
			}
			r := flagRow{env: strings.Join(f.Envs, ", "), def: f.Default, commands: cmd}
			if prev, ok := rows[f.Name]; ok {
				if prev.env != r.env || prev.def != r.def {
					t.Errorf("--%s differs between commands %s and %s: one row cannot show it", f.Name, prev.commands, cmd)
				}
				r.commands = prev.commands + ", " + cmd
			}
			rows[f.Name] = r
		}
		for _, ch := range n.Children {
			if ch.Type == kong.CommandNode {
				walk(ch, strings.TrimSpace(strings.TrimPrefix(cmd, "all")+" "+ch.Name))
			}
		}
	}
	walk(p.Model.Node, "all")
	return rows
}

// readmeFlags reads the README's table of flags: the rows whose first cell
// is a flag.
func readmeFlags(t *testing.T) map[string]flagRow {
	t.Helper()
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]flagRow{}
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, "| `--") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.ReplaceAll(strings.TrimSpace(cells[i]), "`", "")
		}
		if len(cells) != 4 {
			t.Errorf("README row %q: want 4 cells (flag, environment, default, commands)", line)
			continue
		}
		name := strings.TrimPrefix(cells[0], "--")
		if _, dup := rows[name]; dup {
			t.Errorf("README lists --%s twice", name)
		}
		rows[name] = flagRow{env: cells[1], def: cells[2], commands: cells[3]}
	}
	return rows
}

// The README's table lists exactly the flags the binary has, each with the
// environment variables kong reads for it, its default and its commands.
func TestReadmeFlagTableMatchesKong(t *testing.T) {
	want, got := kongFlags(t), readmeFlags(t)
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range want {
			if !yield(k) {
				return
			}
		}
	})
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			r, ok := got[name]
			if !ok {
				t.Fatalf("README's flag table has no row for --%s; want | `--%s` | %s | %s | %s |",
					name, name, want[name].env, want[name].def, want[name].commands)
			}
			if r != want[name] {
				t.Errorf("README row for --%s: %+v, want %+v", name, r, want[name])
			}
			if !strings.HasPrefix(want[name].env, "ROLLAGENT_") {
				t.Errorf("--%s: its first environment variable is %q, not ROLLAGENT_*", name, want[name].env)
			}
		})
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("README lists --%s, which no command has", name)
		}
	}
}

// recorder is a loopback HTTP server that records the token of each request
// and answers 500, so that the CLI stops at its first request.
type recorder struct {
	*httptest.Server
	mu     sync.Mutex
	tokens []string
}

func newRecorder(t *testing.T) *recorder {
	r := &recorder{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.tokens = append(r.tokens, req.Header.Get("X-Consul-Token"))
		r.mu.Unlock()
		http.Error(w, "recorded", http.StatusInternalServerError)
	}))
	t.Cleanup(r.Close)
	return r
}

// seen returns the tokens of the requests so far.
func (r *recorder) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.tokens)
}

// The Consul address and token come from ROLLAGENT_* as every flag's do,
// and from the standard CONSUL_HTTP_*; ROLLAGENT_* wins over CONSUL_HTTP_*,
// and the command line over both.
func TestConsulAddrAndTokenFromEnvironment(t *testing.T) {
	tests := []struct {
		name      string
		env       map[string]string
		flags     []string
		wantAt    string // "a" or "b": the recorder that gets the requests
		wantToken string
	}{
		{"ROLLAGENT_ vars", map[string]string{"ROLLAGENT_CONSUL_ADDR": "a", "ROLLAGENT_TOKEN": "t-rollagent"}, nil, "a", "t-rollagent"},
		{"CONSUL_HTTP_ vars", map[string]string{"CONSUL_HTTP_ADDR": "b", "CONSUL_HTTP_TOKEN": "t-consul"}, nil, "b", "t-consul"},
		{"ROLLAGENT_ wins", map[string]string{"ROLLAGENT_CONSUL_ADDR": "a", "CONSUL_HTTP_ADDR": "b",
			"ROLLAGENT_TOKEN": "t-rollagent", "CONSUL_HTTP_TOKEN": "t-consul"}, nil, "a", "t-rollagent"},
		{"empty ROLLAGENT_ counts as unset", map[string]string{"ROLLAGENT_CONSUL_ADDR": "", "CONSUL_HTTP_ADDR": "b",
			"ROLLAGENT_TOKEN": "", "CONSUL_HTTP_TOKEN": "t-consul"}, nil, "b", "t-consul"},
		{"flags win", map[string]string{"ROLLAGENT_CONSUL_ADDR": "a", "ROLLAGENT_TOKEN": "t-rollagent"},
			[]string{"--consul-addr=b", "--token=t-flag"}, "b", "t-flag"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			at := map[string]*recorder{"a": newRecorder(t), "b": newRecorder(t)}
			addr := func(v string) string {
				if r, ok := at[v]; ok {
					return r.URL
				}
				return v
			}
			for _, k := range []string{"ROLLAGENT_CONSUL_ADDR", "CONSUL_HTTP_ADDR", "ROLLAGENT_TOKEN", "CONSUL_HTTP_TOKEN", "CONSUL_HTTP_TOKEN_FILE"} {
				unsetenv(t, k)
			}
			for k, v := range tc.env {
				t.Setenv(k, addr(v))
			}
			var args []string
			for _, f := range tc.flags {
				name, v, _ := strings.Cut(f, "=")
				args = append(args, name+"="+addr(v))
			}
			code, _, errs := runEnv(t, append(args, "cancel", "web")...)
			if code == 0 {
				t.Fatalf("cancel against a server answering 500 exited 0")
			}
			for name, r := range at {
				got := r.seen()
				if name != tc.wantAt {
					if len(got) != 0 {
						t.Errorf("server %s got %d requests, want them all at %s", name, len(got), tc.wantAt)
					}
					continue
				}
				if len(got) == 0 {
					t.Fatalf("no request reached server %s; stderr %q", name, errs)
				}
				if got[0] != tc.wantToken {
					t.Errorf("token %q, want %q", got[0], tc.wantToken)
				}
			}
		})
	}
}

// With no address anywhere, the help, the connection and its error name
// one and the same default address.
func TestDefaultConsulAddrIsTheOneUsed(t *testing.T) {
	for _, k := range []string{"ROLLAGENT_CONSUL_ADDR", "CONSUL_HTTP_ADDR", "ROLLAGENT_CONFIG"} {
		unsetenv(t, k)
	}
	var out bytes.Buffer
	if code := run(context.Background(), []string{"--help"}, &out, &out); code != 0 {
		t.Fatalf("--help exited %d", code)
	}
	if !strings.Contains(out.String(), `--consul-addr="`+DefaultConsulAddr+`"`) {
		t.Errorf("help does not show the default %s:\n%s", DefaultConsulAddr, out.String())
	}
	// A context already done makes the client fail before it dials, with
	// the URL it would have used, whether or not a Consul listens there.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var stdout, stderr bytes.Buffer
	if code := run(ctx, []string{"cancel", "web"}, &stdout, &stderr); code == 0 {
		t.Fatal("cancel with a done context exited 0")
	}
	if want := "http://" + DefaultConsulAddr; !strings.Contains(stderr.String(), want) {
		t.Errorf("error %q does not name %s", stderr.String(), want)
	}
}
