package agent_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/agent"
)

// An agent's client does not ask Consul to gzip its answers, and its
// address still comes from the standard environment.
func TestConsulConfigAsksForNoCompression(t *testing.T) {
	var mu sync.Mutex
	var encodings []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		encodings = append(encodings, r.Header.Get("Accept-Encoding"))
		mu.Unlock()
		w.Header().Set("X-Consul-Index", "1")
		_, _ = w.Write([]byte(`[{"Key":"k","Value":null}]`))
	}))
	defer srv.Close()
	t.Setenv("CONSUL_HTTP_ADDR", strings.TrimPrefix(srv.URL, "http://"))
	for _, tc := range []struct {
		name string
		cfg  *api.Config
		gzip bool
	}{
		{"api.DefaultConfig", api.DefaultConfig(), true},
		{"agent.ConsulConfig", agent.ConsulConfig(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			encodings = nil
			mu.Unlock()
			c, err := api.NewClient(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := c.KV().Get("k", nil); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(encodings) != 1 {
				t.Fatalf("%d requests reached the server at CONSUL_HTTP_ADDR, want 1", len(encodings))
			}
			if got := strings.Contains(encodings[0], "gzip"); got != tc.gzip {
				t.Fatalf("Accept-Encoding %q: asks for gzip %v, want %v", encodings[0], got, tc.gzip)
			}
		})
	}
}
