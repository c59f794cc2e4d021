package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/consultest"
)

// A group blocked by a Consul check names the check, its status and where
// it runs, in text and in JSON (with no opens_at: no clock opens it), since
// when once a waiting node's record says, and opens once the check passes.
func TestStatusBlockedByCheck(t *testing.T) {
	srv := consultest.NewDev(t)
	c := srv.Client()
	err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: "pg2", Name: "postgres",
		Check: &api.AgentServiceCheck{CheckID: "lag", Name: "replication-lag", TTL: "10m", Status: api.HealthCritical}})
	if err != nil {
		t.Fatal(err)
	}
	node, err := c.Agent().NodeName()
	if err != nil {
		t.Fatal(err)
	}
	spec := "container { image = \"rollagent-demo/web:v1\" }\nupdate {\n  block_on {\n    check = \"replication-lag\"\n  }\n}\n"
	commitWebSpec(t, srv.HTTPAddr, "web.hcl", spec)
	code, out, errs := runCLI(t, srv.HTTPAddr, "status", "web")
	want := `CLOSED (blocked_by_check): blocked by Consul check "replication-lag" (critical) on node ` + node + ", service postgres"
	if code != 0 || !strings.Contains(out, want) {
		t.Fatalf("status: code %d, stderr %s; want %q in:\n%s", code, errs, want, out)
	}
	var doc struct {
		Gate gateDoc `json:"gate"`
	}
	readStatusJSON(t, srv.HTTPAddr, &doc)
	if doc.Gate.State != "blocked_by_check" || !strings.HasPrefix(want, "CLOSED (blocked_by_check): "+doc.Gate.Reason) || doc.Gate.OpensAt != nil {
		t.Fatalf("status -o json gate: %+v, want blocked_by_check naming the check, no opens_at", doc.Gate)
	}
	sinceOfRecords(t, srv, node, want)
	if err := c.Agent().UpdateTTL("lag", "", api.HealthPassing); err != nil {
		t.Fatal(err)
	}
	if _, out, _ = runCLI(t, srv.HTTPAddr, "status", "web"); strings.Contains(out, "CLOSED") {
		t.Fatalf("status once the check passes, want the gate open:\n%s", out)
	}
}

// sinceOfRecords checks status names no since while no record saw the
// check failing (JSON: since null), and the earliest of the waiting
// records' sightings once two do: want, then ", since <time>".
func sinceOfRecords(t *testing.T, srv *consultest.Server, node, want string) {
	t.Helper()
	var doc struct {
		Gate struct {
			Reason    string `json:"reason"`
			BlockedBy []struct {
				Check, Status, Node, Service string
				Since                        *time.Time
			} `json:"blocked_by"`
		} `json:"gate"`
	}
	readStatusJSON(t, srv.HTTPAddr, &doc)
	if b := doc.Gate.BlockedBy; len(b) != 1 || b[0].Check != "replication-lag" || b[0].Status != "critical" || b[0].Node != node ||
		b[0].Service != "postgres" || b[0].Since != nil || strings.Contains(doc.Gate.Reason, "since") {
		t.Fatalf("status -o json before any record saw it: %+v, want the check with since null", doc.Gate)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	first := time.Date(2026, 6, 2, 1, 12, 40, 0, time.UTC)
	st := coordinator.NewStore(srv.Client(), "")
	for i, n := range []string{"n1", "n2"} {
		rec := coordinator.NodeState{Node: n, State: coordinator.StateWaiting, Since: time.Now(), Gate: coordinator.GateBlockedByCheck,
			Blocked: []coordinator.BlockSeen{{Node: node, CheckID: "lag", Since: first.Add(time.Duration(1-i) * time.Minute)}}}
		if err := st.PutNode(ctx, "web", rec); err != nil {
			t.Fatal(err)
		}
	}
	want += ", since 2026-06-02T01:12:40Z"
	if code, out, errs := runCLI(t, srv.HTTPAddr, "status", "web"); code != 0 || !strings.Contains(out, want) {
		t.Fatalf("status: code %d, stderr %s; want %q in:\n%s", code, errs, want, out)
	}
	readStatusJSON(t, srv.HTTPAddr, &doc)
	if b := doc.Gate.BlockedBy; len(b) != 1 || b[0].Since == nil || !b[0].Since.Equal(first) || !strings.HasSuffix(want, doc.Gate.Reason) {
		t.Fatalf("status -o json: %+v, want since %s, the earliest record's", doc.Gate, first)
	}
}
