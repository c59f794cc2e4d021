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
