package main

import (
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/internal/consultest"
)

// A group blocked by a Consul check names the check, its status and where
// it runs, in text and in JSON (with no opens_at: no clock opens it), and
// opens once the check passes.
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
	if err := c.Agent().UpdateTTL("lag", "", api.HealthPassing); err != nil {
		t.Fatal(err)
	}
	if _, out, _ = runCLI(t, srv.HTTPAddr, "status", "web"); strings.Contains(out, "CLOSED") {
		t.Fatalf("status once the check passes, want the gate open:\n%s", out)
	}
}
