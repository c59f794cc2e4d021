package lockstep

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/testkit"
)

// A session on the caller's check keeps that check passing, is lost when
// the check goes, and leaves the check in place when it is closed: the
// caller registered it (with a service) and removes it.
func TestSessionOnCallersCheck(t *testing.T) {
	c := devClient(t)
	ctx := ctxFor(t, 30*time.Second)
	reg := &api.AgentServiceRegistration{ID: "svc-callers-check", Name: "svc-callers-check",
		Checks: api.AgentServiceChecks{{CheckID: "callers-check", Name: "session", TTL: "2s", Status: api.HealthPassing}}}
	if err := c.Agent().ServiceRegister(reg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Agent().ServiceDeregister(reg.ID) })
	began := time.Now()
	s, err := NewSession(ctx, c, SessionOptions{TTL: 2 * time.Second, CheckID: "callers-check"})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CheckID(); got != "callers-check" {
		t.Fatalf("CheckID: %q, want the caller's", got)
	}
	// Well past the TTL, the check still passes: the session keeps it so.
	eventually(t, 10*time.Second, "the check passing 3s after the session began", func() bool {
		checks, err := c.Agent().Checks()
		ch := checks["callers-check"]
		if err != nil || ch == nil || ch.Status != api.HealthPassing {
			t.Fatalf("check: %+v, %v", ch, err)
		}
		return time.Since(began) > 3*time.Second
	})
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	checks, err := c.Agent().Checks()
	if err != nil {
		t.Fatal(err)
	}
	if checks["callers-check"] == nil {
		t.Fatal("Close removed the caller's check")
	}

	s2, err := NewSession(ctx, c, SessionOptions{TTL: 2 * time.Second, CheckID: "callers-check"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s2.Close(ctx) })
	if err := c.Agent().CheckDeregister("callers-check"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "Consul to drop the session whose check went", func() bool {
		e, _, err := c.Session().Info(s2.ID(), nil)
		return err == nil && e == nil
	})
	select {
	case <-s2.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done did not close after the check went")
	}
}

// An abandoned session whose check the caller then removes is gone, with
// the keys it locked; one whose check stays is gone within about a TTL,
// as nobody passes the check any more.
func TestAbandonedSessionEnds(t *testing.T) {
	for _, tc := range []struct {
		name        string
		removeCheck bool
	}{
		{"check removed", true},
		{"check left", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := devClient(t)
			ctx := ctxFor(t, 30*time.Second)
			check := NewCheckID("abandon")
			reg := &api.AgentServiceRegistration{ID: check + "-svc", Name: "abandon",
				Checks: api.AgentServiceChecks{{CheckID: check, Name: "session", TTL: "2s", Status: api.HealthPassing}}}
			if err := c.Agent().ServiceRegister(reg); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Agent().ServiceDeregister(reg.ID) })
			s, err := NewSession(ctx, c, SessionOptions{TTL: 2 * time.Second, CheckID: check})
			if err != nil {
				t.Fatal(err)
			}
			key := "lockstep-abandon/" + check
			if ok, _, err := c.KV().Acquire(&api.KVPair{Key: key, Session: s.ID()}, nil); err != nil || !ok {
				t.Fatalf("acquire: %v %v", ok, err)
			}
			abandoned := time.Now()
			s.Abandon()
			s.Abandon() // twice is fine
			select {
			case <-s.Done():
			default:
				t.Fatal("Done is open after Abandon")
			}
			gone := func() bool {
				e, _, err := c.Session().Info(s.ID(), nil)
				p, _, kerr := c.KV().Get(key, nil)
				return err == nil && e == nil && kerr == nil && p == nil
			}
			if tc.removeCheck {
				if err := c.Agent().CheckDeregister(check); err != nil {
					t.Fatal(err)
				}
				// The agent syncs a removed check to the servers before it
				// answers, and the session ends in that write.
				if !gone() {
					t.Fatal("the session or its key outlived the removal of its check")
				}
				return
			}
			eventually(t, 15*time.Second, "the session and its key to go", gone)
			t.Logf("session gone %s after Abandon", time.Since(abandoned).Round(10*time.Millisecond))
		})
	}
}

// A session on a check that Consul runs lives on with nothing sent to keep
// it, serves turns, and is gone soon after the process Consul checks stops
// answering; the next Acquire on it reports the loss.
func TestSessionOnConsulRunCheck(t *testing.T) {
	srv := consultest.NewDev(t)
	c, log := testkit.CountedClient(srv)
	ctx := ctxFor(t, 60*time.Second)
	alive := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	t.Cleanup(alive.Close)
	reg := &api.AgentServiceRegistration{ID: "svc-alive", Name: "svc-alive",
		Checks: api.AgentServiceChecks{{CheckID: "alive", Name: "process alive", HTTP: alive.URL,
			Interval: "500ms", Timeout: "500ms", FailuresBeforeCritical: 2, Status: api.HealthPassing}}}
	if err := c.Agent().ServiceRegister(reg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Agent().ServiceDeregister(reg.ID) })
	if _, err := NewSession(ctx, c, SessionOptions{ConsulRunsCheck: true}); err == nil {
		t.Fatal("ConsulRunsCheck without a CheckID was accepted")
	}
	s, err := NewSession(ctx, c, SessionOptions{TTL: time.Second, CheckID: "alive", ConsulRunsCheck: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	m, err := New(c, s, Options{Prefix: testPrefix, Name: "alive"})
	if err != nil {
		t.Fatal(err)
	}
	g := commit(t, c, "alive", 1)
	began := time.Now()
	eventually(t, 10*time.Second, "3 turns over more than 3 TTLs", func() bool {
		h, err := m.Acquire(ctx, g)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		return time.Since(began) > 3*time.Second
	})
	if n := log.To(http.MethodPut, "/v1/agent/check/update/alive"); n != 0 {
		t.Fatalf("the session passed the check Consul runs %d times", n)
	}

	alive.Close()
	stopped := time.Now()
	eventually(t, 15*time.Second, "Consul to end the session once its check fails", func() bool {
		e, _, err := c.Session().Info(s.ID(), nil)
		return err == nil && e == nil
	})
	t.Logf("session gone %v after the checked server stopped (interval 500ms, 2 failures)", time.Since(stopped).Round(10*time.Millisecond))
	if _, err := m.Acquire(ctx, g); !errors.Is(err, ErrSessionLost) {
		t.Fatalf("Acquire on the ended session: %v, want ErrSessionLost", err)
	}
	select {
	case <-s.Done():
	default:
		t.Fatal("Done is open after an Acquire found the session gone")
	}
}
