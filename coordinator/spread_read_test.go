package coordinator_test

import (
	"testing"
	"time"

	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/testkit"
)

// A node's domain is its Consul agent's node meta; a node without the key
// is a domain of its own; the others' come from the catalog, by the
// Consul node their records name.
func TestDomainsFromConsul(t *testing.T) {
	srv := consultest.NewDev(t)
	zoneB := consultest.NewZoneClient(t, srv, "b")
	st := coordinator.NewStore(srv.Client(), coordinator.DefaultPrefix)
	ctx := testkit.Context(t, time.Minute)
	if d, err := st.LocalDomain(ctx, "zone"); err != nil || d != "" {
		t.Errorf("a node without the key: %q, %v; want a domain of its own (\"\")", d, err)
	}
	if d, err := coordinator.NewStore(zoneB.Client(), "").LocalDomain(ctx, "zone"); err != nil || d != "zone=b" {
		t.Errorf("a node with zone b: %q, %v; want zone=b", d, err)
	}
	here, err := srv.Client().Agent().NodeName()
	if err != nil {
		t.Fatal(err)
	}
	for n, cn := range map[string]string{"n1": here, "n2": zoneB.Name, "n3": "gone"} {
		if err := st.PutNode(ctx, "web", coordinator.NodeState{Node: n, State: coordinator.StateWaiting, ConsulNode: cn, Since: time.Now().UTC()}); err != nil {
			t.Fatal(err)
		}
	}
	// The client's anti-entropy puts its meta into the catalog.
	testkit.Eventually(t, 30*time.Second, "n2 in zone=b alone, by the catalog", func() bool {
		d, err := st.Domains(ctx, "web", "zone")
		return err == nil && len(d) == 1 && d["n2"] == "zone=b"
	})
}
