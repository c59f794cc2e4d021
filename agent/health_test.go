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
	"github.com/rollagent/rollagent/internal/testkit"
	"github.com/rollagent/rollagent/internal/testkit/groupkit"
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

// judgedHealth is a runtime that judges its workload itself
// (agent.HealthJudge), as Docker does from its health status.
type judgedHealth struct {
	switchHealth
	h agent.Health
}

func (j *judgedHealth) Health(context.Context) (agent.Health, string) {
	_, why := j.Healthy(context.Background())
	return j.h, why
}

func TestHealthHandler(t *testing.T) {
	plain := func(ok bool, why string) func() any {
		return func() any { rt := &switchHealth{}; rt.set(ok, why); return rt }
	}
	judged := func(h agent.Health, why string) func() any {
		return func() any { rt := &judgedHealth{h: h}; rt.set(h == agent.HealthUp, why); return rt }
	}
	for _, tc := range []struct {
		name, method string
		rt           func() any
		code         int
		body         string
	}{
		{"healthy", http.MethodGet, plain(true, "container running"), http.StatusOK, "healthy: container running\n"},
		{"healthy without a reason", http.MethodGet, plain(true, ""), http.StatusOK, "healthy\n"},
		// Consul shows 429 as warning, which does not count the node down:
		// one failed probe is not a node down (DefaultDownAfter).
		{"one failed reading: warning", http.MethodGet, plain(false, "health hook exited 1"), http.StatusTooManyRequests,
			"failing, not down yet: health hook exited 1\n"},
		{"starting, by the runtime's own judge: warning", http.MethodGet, judged(agent.HealthFailing, "health: starting"),
			http.StatusTooManyRequests, "failing, not down yet: health: starting\n"},
		{"down, by the runtime's own judge: critical", http.MethodGet, judged(agent.HealthDown, "health: unhealthy"),
			http.StatusServiceUnavailable, "unhealthy: health: unhealthy\n"},
		{"head", http.MethodHead, judged(agent.HealthDown, "x"), http.StatusServiceUnavailable, ""},
		{"post", http.MethodPost, plain(true, ""), http.StatusMethodNotAllowed, "method not allowed\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := tc.rt().(interface {
				Healthy(context.Context) (bool, string)
			})
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
	counted := &testkit.Counter{}
	g := groupkit.NewVia(t, "httpcheck", counted)
	srv, st, group := g.Srv, g.Store, g.Name
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
	testkit.Eventually(t, 30*time.Second, "the workload check registered", func() bool {
		cs, err := srv.Client().Agent().Checks()
		return err == nil && cs[id] != nil
	})
	if cs, err := srv.Client().Agent().Checks(); err != nil || cs[id].Status != api.HealthPassing {
		t.Fatalf("workload check as first registered: %+v, %v; want passing, as the workload is healthy", cs[id], err)
	}
	// Consul runs the check within its 10 s interval of each registration.
	testkit.Eventually(t, 30*time.Second, "the HTTP check passing", check(api.HealthPassing, "healthy: serving"))
	rt.set(false, "health hook exited 1")
	testkit.Eventually(t, 30*time.Second, "the HTTP check failing with the reason", check(api.HealthCritical, "unhealthy: health hook exited 1"))
	rt.set(true, "serving again")
	testkit.Eventually(t, 30*time.Second, "the HTTP check passing again", check(api.HealthPassing, "healthy: serving again"))
	if n := counted.Containing("/agent/check/update/"); n != 0 {
		t.Fatalf("the agent passed a TTL check %d times; with a HealthURL Consul checks it", n)
	}
	if n := counted.Containing("/agent/service/register"); n == 0 {
		t.Fatal("no service registration was counted: the counting client is not the agent's")
	}
}
