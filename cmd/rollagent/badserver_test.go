package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// silentServer accepts TCP connections and never answers, like a Consul
// whose process hangs, or a wrong port behind a firewall that accepts.
// It returns its address.
func silentServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // held open, never read or answered
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().String()
}

// notConsul is a plain HTTP server that answers 404 to everything, as a
// web server on Consul's port would; it counts the requests it gets.
func notConsul(t *testing.T) (addr string, requests *atomic.Int64) {
	t.Helper()
	requests = new(atomic.Int64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		http.NotFound(w, r)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), requests
}

// runCLIWithin runs the CLI as runCLI does, but ends it after d.
func runCLIWithin(t *testing.T, d time.Duration, addr string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var out, errb bytes.Buffer
	code := run(ctx, append([]string{"--consul-addr=" + addr}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

// Every command that talks to Consul ends within --timeout against a
// server that never answers, and says where it waited and for how long.
func TestSilentServerCommandsEndWithinTimeout(t *testing.T) {
	addr := silentServer(t)
	spec := writeSpec(t, "v1.json", []byte(`{"container": {"image": "rollagent-demo/web:v1"}}`))
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"status", []string{"--timeout=1s", "status", "web"}, nil},
		{"status json", []string{"--timeout=1s", "status", "web", "-o", "json"}, nil},
		{"history", []string{"--timeout=1s", "history", "web"}, nil},
		{"commit", []string{"--timeout=1s", "commit", "web", "-f", spec}, nil},
		{"resume", []string{"--timeout=1s", "resume", "web"}, nil},
		{"rollback", []string{"--timeout=1s", "rollback", "web"}, nil},
		{"cancel", []string{"--timeout=1s", "cancel", "web"}, []string{"CANCEL of group web is NOT recorded", "in 1s"}},
		{"timeout from env", []string{"status", "web"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "timeout from env" {
				t.Setenv("ROLLAGENT_TIMEOUT", "1s")
			}
			start := time.Now()
			code, out, errs := runCLIWithin(t, 20*time.Second, addr, tc.args...)
			took := time.Since(start)
			t.Logf("%s after %s: %s", tc.name, took.Round(time.Millisecond), strings.TrimSpace(errs))
			if code == 0 || took > 5*time.Second {
				t.Fatalf("code %d after %s (want != 0 within about 1s); stdout %q", code, took, out)
			}
			want := append([]string{"no answer from Consul at http://" + addr + " within --timeout=1s"}, tc.want...)
			for _, w := range want {
				if !strings.Contains(errs, w) {
					t.Fatalf("stderr %q does not say %q", errs, w)
				}
			}
		})
	}
}

func TestTimeoutMustBePositive(t *testing.T) {
	for _, v := range []string{"0s", "-5s"} {
		t.Run(v, func(t *testing.T) {
			code, _, errs := runCLI(t, "127.0.0.1:1", "--timeout="+v, "status", "web")
			if code != 2 || !strings.Contains(errs, "--timeout "+v[:len(v)-1]) || !strings.Contains(errs, "must be positive") {
				t.Fatalf("code %d stderr %q", code, errs)
			}
		})
	}
}

// A server that answers HTTP but not as Consul is named as such: it is not
// an empty Consul with nothing committed.
func TestNotConsulServerIsNamed(t *testing.T) {
	addr, _ := notConsul(t)
	spec := writeSpec(t, "v1.json", []byte(`{"container": {"image": "rollagent-demo/web:v1"}}`))
	for name, args := range map[string][]string{
		"status":      {"status", "web"},
		"status json": {"status", "web", "-o", "json"},
		"history":     {"history", "web"},
		"cancel":      {"cancel", "web"},
		"commit":      {"commit", "web", "-f", spec},
		"resume":      {"resume", "web"},
		"rollback":    {"rollback", "web"},
		"watch":       {"status", "web", "--watch"},
	} {
		t.Run(name, func(t *testing.T) {
			code, out, errs := runCLIWithin(t, 10*time.Second, addr, args...)
			want := "http://" + addr + " answered but is not a Consul HTTP API (no X-Consul-Index on a KV read"
			if code == 0 || !strings.Contains(errs, want) {
				t.Fatalf("code %d stdout %q stderr %q; want != 0 and %q", code, out, errs, want)
			}
			t.Logf("%s", strings.TrimSpace(errs))
		})
	}
}

// An agent pointed at a server that is not Consul backs off, rather than
// asking again at once, and stops when told.
func TestRunAgainstNotConsulBacksOff(t *testing.T) {
	addr, requests := notConsul(t)
	dir := t.TempDir()
	const watch = 5 * time.Second
	start := time.Now()
	code, _, errs := runCLIWithin(t, watch, addr, "run", "--group=web", "--node=n1", "--runtime=exec",
		"--state-dir="+dir, "--replace-cmd=true", "--health-cmd=true", "--health-addr=off")
	took, n := time.Since(start), requests.Load()
	t.Logf("%d requests in %s", n, took.Round(time.Millisecond))
	if code != 0 || took > watch+15*time.Second {
		t.Fatalf("run exited %d after %s: %s", code, took, errs)
	}
	if n >= 20 {
		t.Fatalf("%d requests in %s: the agent does not back off", n, watch)
	}
	if !strings.Contains(errs, "is not a Consul HTTP API") {
		t.Fatalf("the agent's log does not say what is wrong:\n%s", errs)
	}
}

// status --watch goes on through an outage, and says for how long Consul
// has not answered, in JSON as in the table.
func TestWatchShowsOutage(t *testing.T) {
	for _, format := range []string{"table", "json"} {
		t.Run(format, func(t *testing.T) {
			code, out, errs := runCLIWithin(t, 2500*time.Millisecond, "127.0.0.1:1", "status", "web", "--watch", "-o", format)
			if code != 0 {
				t.Fatalf("watch exited %d: %s", code, errs)
			}
			want := map[string]string{"table": "no answer from Consul since ", "json": `"outage": {`}[format]
			if !strings.Contains(out, want) || !strings.Contains(out, "127.0.0.1:1") {
				t.Fatalf("the watch does not show the outage (%q):\n%s", want, out)
			}
		})
	}
}

func TestOutageLine(t *testing.T) {
	t0 := time.Date(2024, 5, 1, 10, 0, 0, 0, time.Local)
	var o outageState
	o.fail(errors.New("first"), t0)
	o.fail(errors.New("second"), t0.Add(20*time.Second))
	got := o.line(t0.Add(95 * time.Second))
	if want := "10:01:35: no answer from Consul since 10:00:00 (1m35s): second (retrying)"; got != want {
		t.Fatalf("line %q, want %q", got, want)
	}
}

func TestCancelFailureSaysWhetherRecorded(t *testing.T) {
	t0 := time.Now()
	tests := []struct {
		name  string
		tries cancelTries
		want  string
	}{
		{"never answered", cancelTries{n: 1, start: t0, last: errors.New("x")}, "is NOT recorded: no answer from Consul (1 try in 1s)"},
		{"answer lost", cancelTries{n: 3, start: t0, last: errors.New("x"), maybe: true}, "MAY be recorded: a request reached Consul but its answer was lost (3 tries in 1s); `rollagent status web` tells"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.tries.failure("web", t0.Add(time.Second)).Error(); !strings.Contains(got, tc.want) {
				t.Fatalf("%q does not say %q", got, tc.want)
			}
		})
	}
}
