package coordinator_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/consultest"
)

// A node's domain is its Consul node's meta in the catalog; a Consul node
// the catalog does not know has none that can be told, which is an error,
// never a domain of its own; a node without the key is one of its own.
func TestNodeDomainFromTheCatalog(t *testing.T) {
	srv := consultest.NewDev(t)
	st := coordinator.NewStore(srv.Client(), coordinator.DefaultPrefix)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	here, err := srv.Client().Agent().NodeName()
	if err != nil {
		t.Fatal(err)
	}
	if d, err := st.NodeDomain(ctx, here, "zone"); err != nil || d != "" {
		t.Errorf("a node without the key: %q, %v; want a domain of its own (\"\")", d, err)
	}
	if d, err := st.NodeDomain(ctx, "no-such-node", "zone"); !errors.Is(err, coordinator.ErrNoDomain) {
		t.Errorf("a Consul node not in the catalog: %q, %v; want ErrNoDomain", d, err)
	}
	if err := st.PutNode(ctx, "web", coordinator.NodeState{Node: "n1", State: coordinator.StateWaiting, ConsulNode: here, Since: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	if d, err := st.Domains(ctx, "web", "zone"); err != nil || len(d) != 0 {
		t.Errorf("Domains of a group whose node has no zone: %v, %v; want none", d, err)
	}
}
