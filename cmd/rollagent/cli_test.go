package main

import (
	"bytes"
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/testkit/groupkit"
)

// runCLI runs the CLI in-process against addr and returns exit code, stdout
// and stderr.
func runCLI(t *testing.T, addr string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	code := run(ctx, append([]string{"--consul-addr=" + addr}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

// jsonSpec loads the JSON spec js.
func jsonSpec(t *testing.T, js string) *hashspec.Spec {
	t.Helper()
	s, _, err := hashspec.Load([]byte(js), hashspec.FormatJSON, "s.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func keys(t *testing.T, c *api.Client) []string {
	t.Helper()
	ks, _, err := c.KV().Keys("rollagent/", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(ks)
	return ks
}

func TestCommitThenCancelWritesDocumentedKeys(t *testing.T) {
	srv := consultest.NewDev(t)
	code, out, errs := runCLI(t, srv.HTTPAddr, "commit", "web", "-f", "testdata/web.hcl")
	if code != 0 {
		t.Fatalf("commit: code %d, stderr %s", code, errs)
	}
	sha := strings.SplitN(out, "\n", 2)[0]
	if len(sha) != 64 {
		t.Fatalf("commit printed %q, want the SHA first", out)
	}
	code, out, _ = runCLI(t, srv.HTTPAddr, "commit", "web", "-f", "testdata/web.json")
	if code != 0 || !strings.Contains(out, "already desired") {
		t.Fatalf("same spec as JSON: code %d out %q, want already desired", code, out)
	}
	if code, _, errs = runCLI(t, srv.HTTPAddr, "cancel", "web", "--reason", "test"); code != 0 {
		t.Fatalf("cancel: %s", errs)
	}
	k := groupkit.Keys(t, "web")
	want := []string{
		k.Cancel(sha),
		k.LegacyCancel(sha), // for agents from before brakes/
		k.Desired(),
		k.History(sha),
	}
	// and one event each for the commit and the cancel, under random keys
	var got, events []string
	for _, key := range keys(t, srv.Client()) {
		if strings.HasPrefix(key, k.EventsPrefix()) {
			events = append(events, key)
		} else {
			got = append(got, key)
		}
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") || len(events) != 2 {
		t.Fatalf("keys after commit+cancel:\n%s\nevents %v\nwant:\n%s\nand 2 events", strings.Join(got, "\n"), events, strings.Join(want, "\n"))
	}
	code, _, errs = runCLI(t, srv.HTTPAddr, "commit", "web", "-f", "testdata/web.json")
	if code == 0 || !strings.Contains(errs, "was cancelled") {
		t.Fatalf("re-commit of the cancelled SHA: code %d stderr %q, want a refusal", code, errs)
	}
	code, out, errs = runCLI(t, srv.HTTPAddr, "commit", "web", "-f", "testdata/web-v2.json")
	if code != 0 || !strings.Contains(out, "committed") {
		t.Fatalf("new spec after cancel: code %d out %q err %q", code, out, errs)
	}
}

func TestBadInputExitsNonZeroAndWritesNothing(t *testing.T) {
	srv := consultest.NewDev(t)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"max_parallel 0", []string{"commit", "web", "-f", "testdata/bad-parallel.json"}, "update.max_parallel"},
		{"unknown json field", []string{"commit", "web", "-f", "testdata/bad-unknown.json"}, "container.bogus"},
		{"unknown hcl field", []string{"commit", "web", "-f", "testdata/bad-unknown.hcl"}, "container.nope"},
		{"bad image", []string{"commit", "web", "-f", "testdata/bad-image.json"}, "container.image"},
		{"bad duration", []string{"commit", "web", "-f", "testdata/bad-duration.json"}, "update.min_healthy_time"},
		{"bad syntax", []string{"commit", "web", "-f", "testdata/bad-syntax.json"}, "syntax error"},
		{"missing file", []string{"commit", "web", "-f", "testdata/nope.json"}, "no such file"},
		{"group with slash", []string{"commit", "a/b", "-f", "testdata/web.json"}, "a/b"},
		{"group dot dot", []string{"commit", "../x", "-f", "testdata/web.json"}, "../x"},
		{"group with space", []string{"cancel", "a b"}, "a b"},
		{"empty group", []string{"cancel", ""}, "group"},
		{"group mismatch", []string{"commit", "api", "-f", "testdata/web.json"}, "names group"},
		{"cancel nothing", []string{"cancel", "web"}, "nothing committed"},
		{"unknown flag", []string{"commit", "web", "--bogus"}, "bogus"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errs := runCLI(t, srv.HTTPAddr, tc.args...)
			if code == 0 {
				t.Fatal("exit code 0")
			}
			if !strings.Contains(errs, tc.want) {
				t.Fatalf("stderr %q does not name %q", errs, tc.want)
			}
			if strings.Contains(errs, "goroutine ") {
				t.Fatalf("stack trace on stderr: %s", errs)
			}
			if ks := keys(t, srv.Client()); len(ks) != 0 {
				t.Fatalf("wrote %v", ks)
			}
		})
	}
}

func TestUnreachableConsulNamesTheAddress(t *testing.T) {
	code, _, errs := runCLI(t, "127.0.0.1:1", "cancel", "web")
	if code == 0 || !strings.Contains(errs, "cannot reach Consul at http://127.0.0.1:1") {
		t.Fatalf("code %d stderr %q", code, errs)
	}
}

func TestHashIsOffline(t *testing.T) {
	code, out, errs := runCLI(t, "127.0.0.1:1", "hash", "-f", "testdata/web.hcl")
	_, out2, _ := runCLI(t, "127.0.0.1:1", "hash", "-f", "testdata/web.json")
	if code != 0 || len(strings.TrimSpace(out)) != 64 || out != out2 {
		t.Fatalf("hash: code %d out %q/%q err %q", code, out, out2, errs)
	}
}

// hash of a spec that names no group warns on stderr that no commit
// produces its SHA, and keeps stdout the SHA alone; with --group it prints
// the SHA that commit stores.
func TestHashWarnsWhenTheNameIsMissing(t *testing.T) {
	srv := consultest.NewDev(t)
	code, out, errs := runCLI(t, srv.HTTPAddr, "commit", "web", "-f", "testdata/noname.json")
	if code != 0 {
		t.Fatalf("commit: %s", errs)
	}
	committed := strings.SplitN(out, "\n", 2)[0]
	tests := []struct {
		name      string
		args      []string
		warn      bool
		committed bool // the SHA is the one the commit above stored
	}{
		{"no name, no --group", []string{"hash", "-f", "testdata/noname.json"}, true, false},
		{"no name, --group", []string{"hash", "-f", "testdata/noname.json", "--group", "web"}, false, true},
		{"named in the file", []string{"hash", "-f", "testdata/web.json"}, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := runCLI(t, "127.0.0.1:1", tc.args...)
			if code != 0 || len(out) != 65 || !strings.HasSuffix(out, "\n") {
				t.Fatalf("code %d, stdout %q: want the SHA alone", code, out)
			}
			warned := strings.Contains(errs, "warning") && strings.Contains(errs, "no commit produces this SHA") &&
				strings.Contains(errs, "--group X")
			if warned != tc.warn || (!tc.warn && errs != "") {
				t.Errorf("stderr %q, want a warning: %v", errs, tc.warn)
			}
			if got := strings.TrimSpace(out) == committed; got != tc.committed {
				t.Errorf("SHA %s is the committed %s: %v, want %v", strings.TrimSpace(out), committed, got, tc.committed)
			}
		})
	}
}
