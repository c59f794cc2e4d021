package agent_test

import (
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/testkit/groupkit"
)

// commitDrained commits recordingSpec(release) draining names, and
// returns its SHA.
func commitDrained(t *testing.T, st *coordinator.Store, group, release string, names ...string) string {
	t.Helper()
	s := recordingSpec(t, group, release, "")
	s.Update.Drain = &hashspec.Drain{Services: names}
	return commitSpec(t, st, group, release, s)
}

// registerServices registers each service ID under its name on the dev
// agent that the test's nodes share, and puts those of maint into
// maintenance with their reason.
func registerServices(t *testing.T, c *api.Client, ids map[string]string, maint map[string]string) {
	t.Helper()
	for id, name := range ids {
		if err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: id, Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	for id, reason := range maint {
		if err := c.Agent().EnableServiceMaintenance(id, reason); err != nil {
			t.Fatal(err)
		}
	}
}

// consulMaintenance is the dev agent's maintenance reasons by service ID,
// as Consul holds them.
func consulMaintenance(t *testing.T, c *api.Client) map[string]string {
	t.Helper()
	checks, err := c.Agent().Checks()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for id, ch := range checks {
		if ch.ServiceID != "" && id == "_service_maintenance:"+ch.ServiceID {
			out[ch.ServiceID] = ch.Notes
		}
	}
	return out
}

// `node rm --force` of a drained node removes the record of its drain: its
// agent, back with no record, knows its own maintenance by its reason, and
// lifts it once its workload is healthy and it holds no slot. An
// operator's maintenance, and another node's drain, stay.
func TestDrainLiftedWithoutRecord(t *testing.T) {
	g := groupkit.New(t, "straydrain")
	c := g.Srv.Client()
	ours := "rollagent: " + g.Name + "/n1 drained to replace its workload (2026-01-02T03:04:05Z)"
	theirs := "rollagent: " + g.Name + "/n2 drained to replace its workload (2026-01-02T03:04:05Z)"
	registerServices(t, c, map[string]string{"web-1": "web", "admin-1": "admin", "api-1": "web"},
		map[string]string{"web-1": ours, "admin-1": operatorMaint, "api-1": theirs})
	sha := commitDrained(t, g.Store, g.Name, "v1", "web", "admin")
	if n := nodeState(t, g.Store, g.Name, "n1"); n != nil {
		t.Fatalf("n1 has a record %+v, want none (removed)", n)
	}
	rt := &recordingRuntime{sha: sha}
	startAgent(t, g.Store, g.Name, "n1", rt, agent.Allow{})
	g.WaitFor(30*time.Second, "n1's own maintenance lifted", func() bool {
		_, on := consulMaintenance(t, c)["web-1"]
		return !on
	})
	want := map[string]string{"admin-1": operatorMaint, "api-1": theirs}
	if got := consulMaintenance(t, c); len(got) != len(want) || got["admin-1"] != want["admin-1"] || got["api-1"] != want["api-1"] {
		t.Fatalf("maintenance after the lift: %q, want only the operator's and n2's: %q", got, want)
	}
	noDestructiveCalls(t, rt.Calls())
}

// consulReply is an answer of Consul's with code and body, as a
// RoundTripper that stands in for it gives.
func consulReply(r *http.Request, code int, body string) *http.Response {
	return &http.Response{StatusCode: code, Status: http.StatusText(code), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{}, Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), Request: r}
}

// drainedOnV1 runs node n1 of g, whose spec drains the services ids names
// (registered on g's Consul agent by ID), until it converged on a first
// release; it returns that release's SHA and n1's runtime.
func drainedOnV1(t *testing.T, g *groupkit.Group, ids map[string]string) (string, *recordingRuntime) {
	t.Helper()
	registerServices(t, g.Srv.Client(), ids, nil)
	var names []string
	for _, name := range ids {
		names = append(names, name)
	}
	slices.Sort(names)
	v1 := commitDrained(t, g.Store, g.Name, "v1", names...)
	rt := &recordingRuntime{sha: v1}
	startAgent(t, g.Store, g.Name, "n1", rt, agent.Allow{})
	waitNode(t, g.Store, g.Name, "n1", "converged on v1", func(n *coordinator.NodeState) bool {
		return n.SHA == v1 && n.State == coordinator.StateConverged
	})
	return v1, rt
}
