package main

import (
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/consultest"
)

// A node's token cannot make another node count as down: with the shipped
// agent policy, n2's agent registers, through its own Consul agent, an
// instance in n1's name with a critical check, of n1's service or of its
// alive instance (the service rollagent, which every agent's policy
// writes), and Consul takes either (service write is by service name). It
// lands on n2's Consul node, not on the one n1's record names, so Down
// does not believe it. n1's own instance going critical still counts.
func TestAnotherNodesTokenCannotMakeANodeDown(t *testing.T) {
	srv := aclConsul(t)
	c := srv.Client()
	// The client agent's readiness check reads its node's health without
	// a token.
	anon, _, err := c.ACL().PolicyCreate(&api.ACLPolicy{Name: "anonymous-nodes", Rules: `node_prefix "" { policy = "read" }`}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.ACL().TokenUpdate(&api.ACLToken{AccessorID: "00000000-0000-0000-0000-000000000002",
		Policies: []*api.ACLTokenPolicyLink{{ID: anon.ID}}}, nil); err != nil {
		t.Fatal(err)
	}
	host2 := consultest.NewClients(t, srv, 1, `acl { enabled = true default_policy = "deny" tokens { agent = "`+rootToken+`" } }`)[0]

	// n1 runs on the server's Consul node, which its record names.
	root := coordinator.NewStore(c, "")
	sha := "2a7a4aa35b13bfb4f7d1ae523488a90835fbc8f0e7ab12b1d579a1531da8fd59"
	if err := root.PutNode(t.Context(), "web", coordinator.NodeState{Node: "n1", SHA: sha, Desired: sha,
		State: coordinator.StateConverged, Since: time.Now(), ConsulNode: srv.Name}); err != nil {
		t.Fatal(err)
	}
	alive := coordinator.AliveServiceID("web", "n1")
	if err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: coordinator.ServiceID("web", "n1"),
		Name: coordinator.ServiceName("web"), Check: &api.AgentServiceCheck{CheckID: alive, TTL: "10m", Status: api.HealthPassing}}); err != nil {
		t.Fatal(err)
	}

	// n2's token, through n2's Consul agent, in n1's name.
	n2, err := api.NewClient(&api.Config{Address: host2.HTTPAddr, Token: tokenForNode(t, c, "acl-policy.hcl", "web", "n2")})
	if err != nil {
		t.Fatal(err)
	}
	for _, forged := range []api.AgentServiceRegistration{
		{ID: coordinator.ServiceID("web", "n1"), Name: coordinator.ServiceName("web")},
		{ID: coordinator.AliveServiceID("web", "n1"), Name: coordinator.AliveServiceName, Tags: coordinator.AliveTags("web", "n1")},
	} {
		t.Run("an instance of "+forged.Name, func(t *testing.T) {
			forged.Check = &api.AgentServiceCheck{CheckID: "fake-" + forged.Name, TTL: "10m", Status: api.HealthCritical}
			if err := n2.Agent().ServiceRegister(&forged); err != nil {
				t.Fatalf("n2's token registers an instance in n1's name: %v", err)
			}
			t.Cleanup(func() { _ = n2.Agent().ServiceDeregister(forged.ID) })
			waitCritical(t, c, host2.Name, forged.Check.CheckID)
			down, err := root.Down(t.Context(), "web")
			if err != nil {
				t.Fatal(err)
			}
			if why, ok := down["n1"]; ok {
				t.Fatalf("n1 counts as down (%s) by an instance n2's token registered on Consul node %s", why, host2.Name)
			}
		})
	}
	// The control: n1's own instance, on its own Consul node.
	if err := c.Agent().UpdateTTL(alive, "stopped answering", api.HealthCritical); err != nil {
		t.Fatal(err)
	}
	waitCritical(t, c, srv.Name, alive)
	if down, err := root.Down(t.Context(), "web"); err != nil || down["n1"] != coordinator.DownAgent {
		t.Fatalf("n1's own critical check: down %v, %v; want n1 %s", down, err, coordinator.DownAgent)
	}
}

// waitCritical polls the catalog every 100 ms until check on Consul node
// node is critical, failing the test after 30 s: a client agent syncs its
// registrations to the servers on its own time.
func waitCritical(t *testing.T, c *api.Client, node, check string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		checks, _, err := c.Health().Node(node, nil)
		for _, ch := range checks {
			if err == nil && ch.CheckID == check && ch.Status == api.HealthCritical {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("check %s on %s not critical in the catalog after 30 s: %v, %v", check, node, checks, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
