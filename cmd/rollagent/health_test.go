package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

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
			url, err := serveHealth(ctx, tc.addr, healthyRuntime{}, hclog.NewNullLogger())
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(url, tc.prefix) || !strings.HasSuffix(url, "/health") {
				t.Fatalf("URL %q, want %s<port>/health", url, tc.prefix)
			}
			resp, err := http.Get(url)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK || string(body) != "healthy: ok\n" {
				t.Fatalf("GET %s: %d %q", url, resp.StatusCode, body)
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
