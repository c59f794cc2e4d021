package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"
	"github.com/rollagent/rollagent/internal/consultest"
)

type healthyRuntime struct{}

func (healthyRuntime) Healthy(context.Context) (bool, string) { return true, "ok" }

// The URL given to Consul names a host it can reach: a wildcard listen
// address becomes loopback, as the check is run by the node's own agent.
func TestServeHealthURL(t *testing.T) {
	for _, tc := range []struct{ addr, prefix string }{
		{"127.0.0.1:0", "http://127.0.0.1:"},
		{":0", "http://127.0.0.1:"},
		{"0.0.0.0:0", "http://127.0.0.1:"},
		{"[::]:0", "http://127.0.0.1:"},
	} {
		t.Run(tc.addr, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			urls, err := serveHealth(ctx, tc.addr, healthyRuntime{}, hclog.NewNullLogger())
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(urls.Health, tc.prefix) || !strings.HasSuffix(urls.Health, "/health") {
				t.Fatalf("URL %q, want %s<port>/health", urls.Health, tc.prefix)
			}
			// The liveness path is the process's own, so that another
			// agent on a reused port cannot answer for a dead one.
			base := strings.TrimSuffix(urls.Health, "/health")
			if !strings.HasPrefix(urls.Alive, base+"/alive/") || len(urls.Alive) < len(base+"/alive/")+16 {
				t.Fatalf("liveness URL %q, want %s/alive/<token>", urls.Alive, base)
			}
			for _, u := range []struct {
				url, body string
				status    int
			}{
				{urls.Health, "healthy: ok\n", http.StatusOK},
				{urls.Alive, "alive\n", http.StatusOK},
				{base + "/alive/0123456789abcdef", "404 page not found\n", http.StatusNotFound},
			} {
				resp, err := http.Get(u.url)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != u.status || string(body) != u.body {
					t.Fatalf("GET %s: %d %q, want %d %q", u.url, resp.StatusCode, body, u.status, u.body)
				}
			}
		})
	}
}

// An address that cannot be listened on stops run before it touches
// Consul or the workload, and says which flag was wrong.
func TestRunRefusesBadHealthAddr(t *testing.T) {
	srv := consultest.NewDev(t)
	dir := t.TempDir()
	refused(t, srv, "--health-addr nonsense", "run", "--group=web", "--node=n1", "--runtime=exec", "--state-dir="+dir,
		"--replace-cmd=true", "--health-cmd=true", "--health-addr=nonsense")
}

// `run` asks its Consul agent for uncompressed answers, as agent.ConsulConfig
// does; the operator commands keep api.DefaultConfig.
func TestRunAsksConsulForNoCompression(t *testing.T) {
	srv := consultest.NewDev(t)
	target, err := url.Parse("http://" + srv.HTTPAddr)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]int{} // Accept-Encoding -> requests
	rp := httputil.NewSingleHostReverseProxy(target)
	px := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.Header.Get("Accept-Encoding")]++
		mu.Unlock()
		rp.ServeHTTP(w, r)
	}))
	defer px.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--consul-addr=" + strings.TrimPrefix(px.URL, "http://"), "run", "--group=web", "--node=n1",
			"--runtime=exec", "--state-dir=" + t.TempDir(), "--replace-cmd=true", "--health-cmd=true"}, io.Discard, io.Discard)
	}()
	requests := func() (n int) {
		mu.Lock()
		defer mu.Unlock()
		for _, k := range seen {
			n += k
		}
		return n
	}
	for deadline := time.Now().Add(20 * time.Second); requests() < 3 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("run did not stop within 30s of its context ending")
	}
	mu.Lock()
	defer mu.Unlock()
	if requests := seen[""]; requests < 3 || len(seen) != 1 {
		t.Fatalf("Accept-Encoding of run's requests to Consul: %v; want only none, at least 3 times", seen)
	}
}

// --health-addr=auto serves on loopback only when Consul is reached there:
// loopback is per network namespace, so only then can Consul reach it.
func TestLoopbackHost(t *testing.T) {
	for _, tc := range []struct {
		consul, host string
		ok           bool
	}{
		{"127.0.0.1:8500", "127.0.0.1", true},
		{"http://127.0.0.1:8500", "127.0.0.1", true},
		{"https://127.0.0.2:8501", "127.0.0.1", true},
		{"localhost:8500", "127.0.0.1", true},
		{"LOCALHOST", "127.0.0.1", true},
		{"[::1]:8500", "::1", true},
		{"::1", "::1", true},
		{"10.0.0.5:8500", "", false},
		{"consul.service.internal:8500", "", false},
		{"unix:///var/run/consul.sock", "", false},
		{"", "", false},
	} {
		t.Run(tc.consul, func(t *testing.T) {
			host, ok := loopbackHost(tc.consul)
			if host != tc.host || ok != tc.ok {
				t.Fatalf("loopbackHost(%q) = %q, %v; want %q, %v", tc.consul, host, ok, tc.host, tc.ok)
			}
		})
	}
}

// By default `run` has the Consul agent, reached over loopback here, check
// the workload over loopback; --health-addr=off keeps the TTL check.
func TestRunWorkloadCheckByDefault(t *testing.T) {
	for _, tc := range []struct {
		name, flag, kind, output string
	}{
		{"default", "", "http", "HTTP GET http://127.0.0.1:"},
		{"off", "--health-addr=off", "ttl", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := consultest.NewDev(t)
			// A node registers its service once it has a state to show.
			if code, _, errs := runCLI(t, srv.HTTPAddr, "commit", "web", "-f", "testdata/web.json", "--author=op"); code != 0 {
				t.Fatalf("commit: %d %s", code, errs)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			args := []string{"--consul-addr=" + srv.HTTPAddr, "run", "--group=web", "--node=n1", "--runtime=exec",
				"--state-dir=" + t.TempDir(), "--replace-cmd=true", "--health-cmd=true"}
			if tc.flag != "" {
				args = append(args, tc.flag)
			}
			done := make(chan int, 1)
			go func() { done <- run(ctx, args, io.Discard, io.Discard) }()
			defer func() {
				cancel()
				select {
				case <-done:
				case <-time.After(30 * time.Second):
					t.Error("run did not stop within 30s of its context ending")
				}
			}()
			// Consul runs an HTTP check within its 10 s interval, and its
			// output names the URL it asked.
			var last *api.AgentCheck
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
				cs, err := srv.Client().Agent().Checks()
				if last = cs["rollagent-web-n1:workload"]; err == nil && last != nil && last.Type == tc.kind && strings.Contains(last.Output, tc.output) {
					return
				}
			}
			t.Fatalf("workload check %+v, want a %s check whose output has %q", last, tc.kind, tc.output)
		})
	}
}
