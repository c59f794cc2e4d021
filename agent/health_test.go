package agent_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/fleettest"
)

// switchHealth is a recording runtime whose health the test sets.
type switchHealth struct {
	recordingRuntime
	ok  atomic.Bool
	why atomic.Value // string
}

func (s *switchHealth) set(ok bool, why string) { s.ok.Store(ok); s.why.Store(why) }

func (s *switchHealth) Healthy(context.Context) (bool, string) {
	why, _ := s.why.Load().(string)
	return s.ok.Load(), why
}

func TestHealthHandler(t *testing.T) {
	for _, tc := range []struct {
		name, method string
		ok           bool
		why          string
		code         int
		body         string
	}{
		{"healthy", http.MethodGet, true, "container running", http.StatusOK, "healthy: container running\n"},
		{"healthy without a reason", http.MethodGet, true, "", http.StatusOK, "healthy\n"},
		{"unhealthy", http.MethodGet, false, "health hook exited 1", http.StatusServiceUnavailable, "unhealthy: health hook exited 1\n"},
		{"head", http.MethodHead, false, "x", http.StatusServiceUnavailable, ""},
		{"post", http.MethodPost, true, "", http.StatusMethodNotAllowed, "method not allowed\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := &switchHealth{}
			rt.set(tc.ok, tc.why)
			srv := httptest.NewServer(agent.HealthHandler(rt))
			defer srv.Close()
			req, err := http.NewRequest(tc.method, srv.URL+"/health", nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.code || string(body) != tc.body {
				t.Fatalf("got %d %q, want %d %q", resp.StatusCode, body, tc.code, tc.body)
			}
		})
	}
}

// With a HealthURL, Consul runs the workload check against the agent's
// HealthHandler: the check follows the workload, and the agent passes no
// TTL check itself.
func TestHTTPWorkloadCheck(t *testing.T) {
	srv := consultest.NewDev(t)
	c, counted := countedClient(t, srv)
	st := coordinator.NewStore(c, "")
	group := fleettest.Group("httpcheck")
	rt := &switchHealth{}
	rt.set(true, "serving")
	hs := httptest.NewServer(agent.HealthHandler(rt))
	defer hs.Close()
	commitRecording(t, st, group, "v1", "")
	startAgentWith(t, agent.Config{Group: group, Node: "n1", Store: st, Runtime: rt, Resync: time.Hour, HealthURL: hs.URL + "/health"})
	id := "rollagent-" + group + "-n1:workload"
	check := func(status, output string) func() bool {
		return func() bool {
			cs, err := srv.Client().Agent().Checks()
			ch := cs[id]
			return err == nil && ch != nil && ch.Type == "http" && ch.Status == status && strings.Contains(ch.Output, output)
		}
	}
	// The first registration carries the workload's health, before Consul
	// has run the check at all.
	fleettest.WaitFor(t, 30*time.Second, "the workload check registered", func() bool {
		cs, err := srv.Client().Agent().Checks()
		return err == nil && cs[id] != nil
	})
	if cs, err := srv.Client().Agent().Checks(); err != nil || cs[id].Status != api.HealthPassing {
		t.Fatalf("workload check as first registered: %+v, %v; want passing, as the workload is healthy", cs[id], err)
	}
	// Consul runs the check within its 10 s interval of each registration.
	fleettest.WaitFor(t, 30*time.Second, "the HTTP check passing", check(api.HealthPassing, "healthy: serving"))
	rt.set(false, "health hook exited 1")
	fleettest.WaitFor(t, 30*time.Second, "the HTTP check failing with the reason", check(api.HealthCritical, "unhealthy: health hook exited 1"))
	rt.set(true, "serving again")
	fleettest.WaitFor(t, 30*time.Second, "the HTTP check passing again", check(api.HealthPassing, "healthy: serving again"))
	if n := counted.count("/agent/check/update/"); n != 0 {
		t.Fatalf("the agent passed a TTL check %d times; with a HealthURL Consul checks it", n)
	}
	if n := counted.count("/agent/service/register"); n == 0 {
		t.Fatal("no service registration was counted: the counting client is not the agent's")
	}
}
