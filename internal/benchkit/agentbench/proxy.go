package agentbench

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// countingProxy is a loopback reverse proxy to a Consul agent that counts
// requests by method, path class and whether they block (an index=
// parameter other than 0).
type countingProxy struct {
	addr     string
	mu       sync.Mutex
	n        map[string]int // started
	inFlight map[string]int
}

func newCountingProxy(tb testing.TB, target string) *countingProxy {
	tb.Helper()
	u, err := url.Parse("http://" + target)
	if err != nil {
		tb.Fatal(err)
	}
	px := &countingProxy{n: map[string]int{}, inFlight: map[string]int{}}
	rp := httputil.NewSingleHostReverseProxy(u)
	// A request the agent gives up on (it is killed at the end) is no
	// error worth a log line.
	rp.ErrorHandler = func(w http.ResponseWriter, _ *http.Request, _ error) { w.WriteHeader(http.StatusBadGateway) }
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		kind := ""
		if idx := r.URL.Query().Get("index"); idx != "" && idx != "0" {
			kind = " (blocking)"
		}
		class := r.Method + " " + pathClass(r.URL.Path) + kind
		px.mu.Lock()
		px.n[class]++
		px.inFlight[class]++
		px.mu.Unlock()
		rp.ServeHTTP(w, r)
		px.mu.Lock()
		px.inFlight[class]--
		px.mu.Unlock()
	}))
	tb.Cleanup(func() { hs.CloseClientConnections(); hs.Close() })
	px.addr = hs.Listener.Addr().String()
	return px
}

// counts returns the requests started so far, and those in flight now.
func (px *countingProxy) counts() (started, inFlight map[string]int) {
	px.mu.Lock()
	defer px.mu.Unlock()
	started, inFlight = map[string]int{}, map[string]int{}
	for k, v := range px.n {
		started[k] = v
	}
	for k, v := range px.inFlight {
		if v > 0 {
			inFlight[k] = v
		}
	}
	return started, inFlight
}

// pathClass drops the key or ID at the end of a Consul API path.
func pathClass(p string) string {
	for _, prefix := range []string{"/v1/kv/", "/v1/agent/check/update/", "/v1/agent/check/pass/",
		"/v1/agent/check/deregister/", "/v1/agent/service/deregister/", "/v1/session/renew/",
		"/v1/session/destroy/", "/v1/session/info/"} {
		if strings.HasPrefix(p, prefix) {
			return prefix + "…"
		}
	}
	return p
}
