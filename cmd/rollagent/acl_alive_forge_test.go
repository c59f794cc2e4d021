package main

import (
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/testkit"
)

// review 23a7809: the service rule "rollagent" is the same in every group's
// policy, and Down reads every instance of it tagged with the group. A
// stolen agent token of another group (db) may not register an instance of
// web's service, but it may register an alive instance in the name of a
// node web has never had, tagged group:web, with a critical check: web's
// Down counts that node as agent_not_answering, against max_parallel, from
// any Consul node (no record names one to tell it by).
func TestAnotherGroupsTokenCannotCountANodeOfWebDown(t *testing.T) {
	srv, c, root := aclRoot(t)
	dbTok := tokenWith(t, c, "agent-db-m1", policyRules(t, c, "acl-policy.hcl", "db", "m1"))
	cfg := api.DefaultConfig()
	cfg.Address, cfg.Token = srv.HTTPAddr, dbTok
	db, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	check := &api.AgentServiceCheck{CheckID: "ghost-alive", Name: "rollagent alive", TTL: "10m", Status: api.HealthCritical}
	// What the policy meant to forbid, and does: web's own service.
	if err := db.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: coordinator.ServiceID("web", "ghost"),
		Name: coordinator.ServiceName("web"), Check: check}); err == nil {
		t.Fatal("db's token registered an instance of web's service")
	}
	if err := db.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: coordinator.AliveServiceID("web", "ghost"),
		Name: coordinator.AliveServiceName, Tags: coordinator.AliveTags("web", "ghost"), Check: check}); err != nil {
		// The shipped policy lets every group's agents write the service
		// rollagent (its comment says what that allows): this must work,
		// or the test would prove nothing.
		t.Fatalf("db's token may not register an alive instance under the shipped policy: %v", err)
	}
	testkit.Eventually(t, 10*time.Second, "the forged check in the catalog", func() bool {
		cs, _, err := c.Health().State(api.HealthCritical, nil)
		for _, hc := range cs {
			if err == nil && hc.CheckID == "ghost-alive" {
				return true
			}
		}
		return false
	})
	if down, err := root.Down(t.Context(), "web"); err != nil || len(down) != 0 {
		t.Fatalf("web's Down = %v, %v after db's token registered an alive instance tagged group:web; want no node down", down, err)
	}
}
