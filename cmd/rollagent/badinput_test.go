package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/consultest"
)

// kvSnapshot is every key under rollagent/ with its value, flags and
// ModifyIndex: two equal snapshots mean nothing was written, not even the
// same value again.
func kvSnapshot(t *testing.T, c *api.Client) string {
	t.Helper()
	pairs, _, err := c.KV().List("rollagent/", nil)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, p := range pairs {
		fmt.Fprintf(&b, "%s flags=%d index=%d %q\n", p.Key, p.Flags, p.ModifyIndex, p.Value)
	}
	return b.String()
}

// kvUnchanged fails the test if the KV snapshot differs from before.
func kvUnchanged(t *testing.T, c *api.Client, before string) {
	t.Helper()
	if after := kvSnapshot(t, c); after != before {
		t.Fatalf("KV changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// refused runs args and wants a non-zero exit whose stderr names want,
// carries no stack trace, and stays short, and no change to KV.
func refused(t *testing.T, srv *consultest.Server, want string, args ...string) string {
	t.Helper()
	before := kvSnapshot(t, srv.Client())
	code, _, errs := runCLI(t, srv.HTTPAddr, args...)
	if code == 0 {
		t.Fatalf("%v: exit code 0", args)
	}
	if !strings.Contains(errs, want) {
		t.Fatalf("stderr %q does not name %q", errs, want)
	}
	if strings.Contains(errs, "goroutine ") || len(errs) > 2000 {
		t.Fatalf("stderr is a dump, not a message (%d bytes): %.2000s", len(errs), errs)
	}
	kvUnchanged(t, srv.Client(), before)
	return errs
}

// writeSpec writes body into a temp file called name and returns its path.
func writeSpec(t *testing.T, name string, body []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, body, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// A bad spec committed over a group with a rollout in KV leaves that KV
// exactly as it was, and the error names the field.
func TestBadSpecIsRefusedAndKVUnchanged(t *testing.T) {
	srv := consultest.NewDev(t)
	commitWeb(t, srv.HTTPAddr)
	huge := append([]byte(`{"name":"web","container":{"image":"x:1"}}`), bytes.Repeat([]byte(" "), 10<<20)...)
	tests := []struct {
		name, file, body, want string
	}{
		{"invalid JSON", "s.json", `{"name": "web", "container": {"image": "x:1",}}`, "syntax error"},
		{"truncated JSON", "s.json", `{"name": "web", "container": `, "unexpected end of input"},
		{"invalid HCL", "s.hcl", "container {\n  image = \n}\n", "s.hcl:2"},
		{"unknown JSON field", "s.json", `{"container": {"image": "x:1", "imagе": "y"}}`, "container.imag"},
		{"unknown HCL block", "s.hcl", "container {\n image = \"x:1\"\n}\nupdates {\n}\n", "updates"},
		{"wrong type JSON", "s.json", `{"container": {"image": "x:1"}, "update": {"max_parallel": "2"}}`, "update.max_parallel"},
		{"wrong type HCL", "s.hcl", "container {\n image = \"x:1\"\n}\nupdate {\n max_parallel = \"two\"\n}\n", "update.max_parallel"},
		{"list for string", "s.json", `{"container": {"image": ["x:1"]}}`, "container.image"},
		{"10 MB spec", "s.json", string(huge), "larger than"},
		{"missing image", "s.json", `{"container": {"cmd": ["serve"]}}`, "container.image: is required"},
		{"bad duration", "s.json", `{"container": {"image": "x:1"}, "update": {"healthy_deadline": "5 minutes"}}`, "update.healthy_deadline"},
		{"negative duration", "s.hcl", "container {\n image = \"x:1\"\n}\nupdate {\n min_healthy_time = \"-1s\"\n}\n", "update.min_healthy_time"},
		{"negative max_parallel", "s.json", `{"container": {"image": "x:1"}, "update": {"max_parallel": -1}}`, "update.max_parallel"},
		{"env value with newline", "s.json", `{"container": {"image": "x:1", "env": {"FOO": "a\nb"}}}`, "container.env.FOO"},
		{"env value with NUL", "s.json", `{"container": {"image": "x:1", "env": {"FOO": "a\u0000b"}}}`, "container.env.FOO"},
		{"env value with newline in HCL", "s.hcl", "container {\n image = \"x:1\"\n env = { FOO = \"a\\nb\" }\n}\n", "container.env.FOO"},
		{"env value with NUL in HCL", "s.hcl", "container {\n image = \"x:1\"\n env = { FOO = \"a\\u0000b\" }\n}\n", "container.env.FOO"},
		{"empty file", "s.json", "", "empty input"},
		{"absurd healthy_deadline", "s.hcl", "container {\n image = \"x:1\"\n}\nupdate {\n healthy_deadline = \"2562047h47m\"\n}\n",
			"update.healthy_deadline: must be at most 24h0m0s"},
		{"absurd healthcheck interval", "s.json", `{"container": {"image": "x:1", "healthcheck": {"test": ["NONE"], "interval": "9000h"}}}`,
			"container.healthcheck.interval: must be at most 24h0m0s"},
		{"env key twice in HCL", "s.hcl", "container {\n image = \"x:1\"\n env = {\n  A = \"1\"\n  A = \"2\"\n }\n}\n", "container.env.A: duplicate key"},
		{"decomposed bind source in JSON", "s.json", `{"container": {"image": "x:1", "volumes": [{"type": "bind", "source": "/srv/cafe\u0301", "target": "/d"}]}}`,
			"container.volumes[0].source: must be in Unicode normalization form C"},
		{"decomposed bind source in HCL", "s.hcl", "container {\n image = \"x:1\"\n volume {\n  type = \"bind\"\n  source = \"/srv/cafe\u0301\"\n  target = \"/d\"\n }\n}\n",
			"container.volumes[0].source: must be in Unicode normalization form C"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			refused(t, srv, tc.want, "commit", "web", "-f", writeSpec(t, tc.file, []byte(tc.body)))
		})
	}
	if hashspec.MaxSpecBytes >= len(huge) {
		t.Fatalf("the 10 MB case is under the %d-byte limit", hashspec.MaxSpecBytes)
	}
}

// Names that could leave their group's tree in KV, or pass for another
// group, are refused by every command that takes one, before any write.
func TestBadNamesAreRefusedByEveryCommand(t *testing.T) {
	srv := consultest.NewDev(t)
	commitWeb(t, srv.HTTPAddr)
	dir := t.TempDir()
	run := func(group, node string) []string {
		return []string{"run", "--group=" + group, "--node=" + node, "--runtime=exec", "--state-dir=" + dir,
			"--replace-cmd=true", "--health-cmd=true"}
	}
	names := []struct{ name, in string }{
		{"parent", "../x"},
		{"slash", "a/b"},
		{"empty", ""},
		{"300 chars", strings.Repeat("g", 300)},
		{"cyrillic e", "w\u0435b"},
		{"cyrillic a", "\u0430pi"},
		{"trailing dot", "web."},
	}
	for _, n := range names {
		commands := map[string][]string{
			"commit":    {"commit", n.in, "-f", "testdata/noname.json"},
			"cancel":    {"cancel", n.in},
			"resume":    {"resume", n.in},
			"rollback":  {"rollback", n.in},
			"status":    {"status", n.in},
			"history":   {"history", n.in},
			"plan":      {"plan", n.in, "-f", "testdata/noname.json"},
			"hash":      {"hash", "-f", "testdata/noname.json", "--group", n.in},
			"run group": run(n.in, "n1"),
			"run node":  run("web", n.in),
		}
		if n.in == "" {
			// Empty means not given: --node then defaults to the host
			// name, and hash --group to the name in the file.
			delete(commands, "run node")
			delete(commands, "hash")
		}
		for cmd, args := range commands {
			t.Run(n.name+"/"+cmd, func(t *testing.T) {
				want := "invalid name"
				if cmd == "hash" {
					want = "noname.json: name: " // the field of the spec the name went into
				}
				refused(t, srv, want, args...)
			})
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("run wrote into its state dir: %v", entries)
	}
}

// A run flag out of its bounds is refused before the agent touches KV or
// its state dir, not silently replaced by the default or taken as is.
func TestBadRunFlagsAreRefused(t *testing.T) {
	srv := consultest.NewDev(t)
	commitWeb(t, srv.HTTPAddr)
	for _, tc := range []struct{ name, flag, want string }{
		// A replace hook bound that is not a positive duration: it is also
		// the step bound of the node's lease.
		{"hook timeout zero", "--hook-timeout=0s", "--hook-timeout 0s: must be positive"},
		{"hook timeout negative", "--hook-timeout=-1m", "--hook-timeout -1m0s: must be positive"},
		{"hook timeout not a duration", "--hook-timeout=soon", "--hook-timeout"},
		{"hook timeout over a day", "--hook-timeout=2562047h", "--hook-timeout 2562047h0m0s: must be at most 24h0m0s"},
		// A hook environment variable that would hand the hooks the agent's
		// Consul token (or any CONSUL_* or ROLLAGENT_* setting).
		{"hook env the token", "--hook-env=CONSUL_HTTP_TOKEN", "--hook-env: CONSUL_HTTP_TOKEN refused as a hook environment variable"},
		{"hook env the token file", "--hook-env=CONSUL_HTTP_TOKEN_FILE", "CONSUL_HTTP_TOKEN_FILE refused"},
		{"hook env rollagent's token", "--hook-env=ROLLAGENT_TOKEN", "ROLLAGENT_TOKEN refused"},
		// A session TTL outside its documented range.
		{"session ttl zero", "--session-ttl=0s", "--session-ttl 0s: must be between 3s and 30s"},
		{"session ttl negative", "--session-ttl=-5s", "--session-ttl -5s: must be between 3s and 30s"},
		{"session ttl under the minimum", "--session-ttl=2999ms", "--session-ttl 2.999s: must be between 3s and 30s"},
		{"session ttl over the maximum", "--session-ttl=31s", "--session-ttl 31s: must be between 3s and 30s"},
		{"session ttl a hundred hours", "--session-ttl=100h", "--session-ttl 100h0m0s: must be between 3s and 30s"},
		// A malformed --allow-volume or --allow-network pattern, which must
		// not be taken to match nothing.
		{"allow volume", "--allow-volume=web-[", `--allow-volume "web-[": not a pattern`},
		{"allow network", "--allow-network=[]", `--allow-network "[]": not a pattern`},
	} {
		t.Run(tc.name, func(t *testing.T) { refusedRun(t, srv, tc.want, tc.flag) })
	}
}

// refusedRun runs an exec-runtime agent with flag, which must be refused
// with want before the agent writes anything into its state dir.
func refusedRun(t *testing.T, srv *consultest.Server, want, flag string) {
	t.Helper()
	dir := t.TempDir()
	refused(t, srv, want, "run", "--group=web", "--node=n1", "--runtime=exec", "--state-dir="+dir,
		"--replace-cmd=true", "--health-cmd=true", flag)
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("run wrote into its state dir: %v", entries)
	}
}

// stdinFrom makes path the process's stdin for the test.
func stdinFrom(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdin
	os.Stdin = f
	t.Cleanup(func() { os.Stdin = old; f.Close() })
}

// A spec in the other format than the one assumed fails with a hint to
// pass --format; a spec broken in its own format gets no such hint.
func TestFormatMismatchHints(t *testing.T) {
	srv := consultest.NewDev(t)
	commitWeb(t, srv.HTTPAddr)
	hcl, err := os.ReadFile("testdata/web.hcl")
	if err != nil {
		t.Fatal(err)
	}
	const toHCL, toJSON = "(the input looks like HCL: pass --format hcl)", "(the input looks like JSON: pass --format json)"
	tests := []struct {
		name  string
		stdin string // file for stdin, when -f -
		args  []string
		want  string // "" for no hint
	}{
		{"HCL on stdin", "testdata/web.hcl", []string{"-f", "-"}, toHCL},
		{"JSON on stdin with --format hcl", "testdata/web.json", []string{"-f", "-", "--format", "hcl"}, toJSON},
		{"HCL in a .json file", "", []string{"-f", writeSpec(t, "web.json", hcl)}, toHCL},
		{"broken HCL in a .json file", "", []string{"-f", writeSpec(t, "s.json", []byte("container {\n image = \n}\n"))}, toHCL},
		{"broken JSON", "", []string{"-f", "testdata/bad-syntax.json"}, ""},
		{"broken HCL", "", []string{"-f", writeSpec(t, "s.hcl", []byte("container {\n image = \n}\n"))}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.stdin != "" {
				stdinFrom(t, tc.stdin)
			}
			want := tc.want
			if want == "" {
				want = "rollagent: error:"
			}
			errs := refused(t, srv, want, append([]string{"commit", "web"}, tc.args...)...)
			if tc.want == "" && strings.Contains(errs, "looks like") {
				t.Fatalf("hint for a spec broken in its own format: %q", errs)
			}
		})
	}
}
