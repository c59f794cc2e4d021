package lockstep

import (
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
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
