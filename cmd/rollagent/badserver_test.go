package main

import (
	"bytes"
	"context"
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
