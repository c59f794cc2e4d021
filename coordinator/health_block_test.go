package coordinator_test

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/testkit"
)

// Read and ReadFor read the health of what the desired spec blocks on
// from Consul: a service's check anywhere (Read and ReadFor alike), and a
// node's check only for the agent on that Consul node (ReadFor, through
// the client of the agent on it).
func TestBlockHealthFromConsul(t *testing.T) {
	srv := consultest.NewDev(t)
	other := consultest.NewClients(t, srv, 1, "")[0]
	c := srv.Client()
	st := coordinator.NewStore(c, coordinator.DefaultPrefix)
	ctx := testkit.Context(t, time.Minute)
	err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: "pg1", Name: "postgres", Tags: []string{"primary"},
		Check: &api.AgentServiceCheck{CheckID: "pg1-alive", Name: "pg1 alive", TTL: "10m", Status: api.HealthCritical}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Agent().CheckRegister(&api.AgentCheckRegistration{ID: "disk", Name: "disk",
		AgentServiceCheck: api.AgentServiceCheck{TTL: "10m", Status: api.HealthCritical}}); err != nil {
		t.Fatal(err)
	}
	spec, _, err := hashspec.Load([]byte(`{"container":{"image":"demo:v1"},"update":{
		"block_on":[{"service":"postgres","tag":"primary"}],"block_on_node":[{"check":"disk"}]}}`), hashspec.FormatJSON, "s.json")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Commit(ctx, "web", spec, "op", "blocks"); err != nil {
		t.Fatal(err)
	}
	node, err := c.Agent().NodeName()
	if err != nil {
		t.Fatal(err)
	}
	gate := func(read func() (*coordinator.GroupState, error)) coordinator.Verdict {
		t.Helper()
		gs, err := read()
		if err != nil {
			t.Fatal(err)
		}
		return gs.Gate()
	}
	readAll := func() (*coordinator.GroupState, error) { return st.Read(ctx, "web", nil) }
	readHere := func() (*coordinator.GroupState, error) { return st.ReadFor(ctx, "web", "n1") }
	otherSt := coordinator.NewStore(other.Client(), coordinator.DefaultPrefix)
	readThere := func() (*coordinator.GroupState, error) { return otherSt.ReadFor(ctx, "web", "n2") }
	want := `blocked by Consul check "pg1 alive" (critical) on node ` + node + ", service postgres"
	// The agents' own node checks fail too ("(and 1 more)"): the service's
	// check is named first.
	for _, read := range []func() (*coordinator.GroupState, error){readAll, readHere, readThere} {
		if v := gate(read); v.Open || v.State != coordinator.GateBlockedByCheck || !strings.HasPrefix(v.Reason, want) {
			t.Errorf("with the primary critical: %s %q, want %s %q", v.State, v.Reason, coordinator.GateBlockedByCheck, want)
		}
	}
	if err := c.Agent().UpdateTTL("pg1-alive", "", api.HealthPassing); err != nil {
		t.Fatal(err)
	}
	if v := gate(readAll); !v.Open {
		t.Errorf("status with the primary passing: %q, want open (a node's own check is its agent's to judge)", v.Reason)
	}
	if v := gate(readHere); v.Open || !strings.Contains(v.Reason, `"disk" (critical) on node `+node) {
		t.Errorf("the node with its disk critical: %q, want blocked by it", v.Reason)
	}
	if v := gate(readThere); v.Open || !strings.Contains(v.Reason, "no Consul check matches it on node "+other.Name) {
		t.Errorf("a node with no disk check: %q, want blocked: nothing matches", v.Reason)
	}
	if err := other.Client().Agent().CheckRegister(&api.AgentCheckRegistration{ID: "disk", Name: "disk",
		AgentServiceCheck: api.AgentServiceCheck{TTL: "10m", Status: api.HealthPassing}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for v := gate(readThere); !v.Open; v = gate(readThere) {
		if time.Now().After(deadline) {
			t.Fatalf("a node whose disk passes, while another's is critical: %q, want open", v.Reason)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if v := gate(readHere); v.Open {
		t.Error("the node with its disk critical opened when another's passed")
	}
	// Status tells the nodes a check of block_on_node holds, by the Consul
	// node their records name, from one that is stalled.
	for n, cn := range map[string]string{"n1": node, "n2": other.Name} {
		if err := st.PutNode(ctx, "web", coordinator.NodeState{Node: n, State: coordinator.StateWaiting, ConsulNode: cn, Since: time.Now().UTC()}); err != nil {
			t.Fatal(err)
		}
	}
	gs, err := st.Read(ctx, "web", nil)
	if err != nil {
		t.Fatal(err)
	}
	if f := gs.Health.OnNodes; len(f) != 1 || len(f[node]) != 1 || f[node][0].Check != "disk" {
		t.Errorf("Health.OnNodes = %+v, want the disk of %s alone", f, node)
	}
	if in := gs.StallInput(time.Now(), gs.Summary(time.Now(), time.Hour)); len(in.NodeChecks) != 1 || in.NodeChecks["n1"] == "" {
		t.Errorf("StallInput.NodeChecks = %v, want n1's", in.NodeChecks)
	}
}
