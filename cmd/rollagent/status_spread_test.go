package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/testkit"
	"github.com/rollagent/rollagent/lockstep"
)

// status says which node waits for its zone, by the Consul node meta of
// the nodes' Consul nodes and the domain the holder's grant recorded, in
// text and JSON; a node whose Consul node has no zone waits for nothing.
func TestStatusNodeWaitsForItsZone(t *testing.T) {
	srv := consultest.NewDev(t)
	zoneB := consultest.NewZoneClient(t, srv, "b")
	// The client registers its node, meta and all, at its first sync.
	testkit.Eventually(t, 30*time.Second, "the zone=b client in the catalog", func() bool {
		n, _, err := srv.Client().Catalog().Node(zoneB.Name, nil)
		return err == nil && n != nil && n.Node != nil && n.Node.Meta["zone"] == "b"
	})
	spec := "container { image = \"rollagent-demo/web:v1\" }\nupdate {\n  max_parallel = 2\n  max_parallel_per {\n    key = \"zone\"\n    max = 1\n  }\n}\n"
	commitWebSpec(t, srv.HTTPAddr, "web.hcl", spec)
	st := coordinator.NewStore(srv.Client(), coordinator.DefaultPrefix)
	ctx := testkit.Context(t, time.Minute)
	gs, err := st.Read(ctx, "web", nil)
	if err != nil {
		t.Fatal(err)
	}
	here, err := srv.Client().Agent().NodeName()
	if err != nil {
		t.Fatal(err)
	}
	sha := gs.Desired.SHA
	putNode(t, st, coordinator.NodeState{Node: "n1", Desired: sha, State: coordinator.StateWaiting, ConsulNode: here, Since: time.Now()})
	putNode(t, st, coordinator.NodeState{Node: "n2", Desired: sha, State: coordinator.StateReplacing, ConsulNode: zoneB.Name, Since: time.Now()})
	putNode(t, st, coordinator.NodeState{Node: "n4", Desired: sha, State: coordinator.StateWaiting, ConsulNode: zoneB.Name, Since: time.Now()})
	k, err := coordinator.NewKeys(coordinator.DefaultPrefix, "web")
	if err != nil {
		t.Fatal(err)
	}
	sess, err := lockstep.NewSession(ctx, srv.Client(), lockstep.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sess.Close(context.Background()) }()
	m, err := st.NewSemaphore(sess, lockstep.Options{Prefix: k.Slot(), Name: "n2", Domain: "zone=b"})
	if err != nil {
		t.Fatal(err)
	}
	g := gs.LockGate(k)
	g.Lease = time.Minute
	h, err := m.Acquire(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.Release(context.Background()) }()

	code, out, errs := runCLI(t, srv.HTTPAddr, "status", "web")
	want := "n4 waits: zone=b has 1 of max 1 unavailable (n2)\n"
	if code != 0 || !strings.Contains(out, want) || strings.Contains(out, "n1 waits") {
		t.Fatalf("status: code %d, stderr %s; want %q, and nothing of n1, in:\n%s", code, errs, want, out)
	}
	var doc struct {
		DomainWaits []domainWaitJSON `json:"domain_waits"`
	}
	readStatusJSON(t, srv.HTTPAddr, &doc)
	if w := doc.DomainWaits; len(w) != 1 || w[0].Node != "n4" || w[0].Domain != "zone=b" || w[0].Max != 1 ||
		len(w[0].Used) != 1 || w[0].Used[0] != "n2" {
		t.Fatalf("domain_waits = %+v, want n4 waiting on n2 in zone=b", w)
	}
}

// A down node whose Consul node was pruned from the catalog still counts
// in its zone, the one its record carries (NodeState.Domain): its zone's
// next node waits for it, as it waited while the catalog had the node.
func TestStatusPrunedNodeCountsInItsZone(t *testing.T) {
	srv := consultest.NewDev(t)
	c := srv.Client()
	for _, host := range []string{"host-b1", "host-b3"} {
		reg := &api.CatalogRegistration{Node: host, Address: "192.0.2.1", NodeMeta: map[string]string{"zone": "b"}}
		if _, err := c.Catalog().Register(reg, nil); err != nil {
			t.Fatal(err)
		}
	}
	spec := "container { image = \"rollagent-demo/web:v1\" }\nupdate {\n  max_parallel = 2\n  max_parallel_per {\n    key = \"zone\"\n    max = 1\n  }\n}\n"
	commitWebSpec(t, srv.HTTPAddr, "web.hcl", spec)
	st := coordinator.NewStore(c, coordinator.DefaultPrefix)
	ctx := testkit.Context(t, time.Minute)
	gs, err := st.Read(ctx, "web", nil)
	if err != nil {
		t.Fatal(err)
	}
	sha, now := gs.Desired.SHA, time.Now()
	// n3's agent stopped cleanly (its stop mark): down, with a workload.
	putNode(t, st, coordinator.NodeState{Node: "n3", SHA: sha, Desired: sha, State: coordinator.StateConverged, ConsulNode: "host-b3",
		Domain: "zone=b", Stopped: &now, Since: now})
	putNode(t, st, coordinator.NodeState{Node: "n4", Desired: sha, State: coordinator.StateWaiting, ConsulNode: "host-b1", Since: now})
	if _, err := c.Catalog().Deregister(&api.CatalogDeregistration{Node: "host-b3"}, nil); err != nil {
		t.Fatal(err)
	}
	if d, err := st.Domains(ctx, "web", "zone"); err != nil || d["n3"] != "zone=b" {
		t.Fatalf("domains %v, %v: want n3, pruned from the catalog, in zone=b by its record", d, err)
	}
	code, out, errs := runCLI(t, srv.HTTPAddr, "status", "web")
	if want := "n4 waits: zone=b has 1 of max 1 unavailable (n3)\n"; code != 0 || !strings.Contains(out, want) {
		t.Fatalf("status: code %d, stderr %s; want %q in:\n%s", code, errs, want, out)
	}
}
