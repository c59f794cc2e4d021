package coordinator_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/testkit"
)

// The commit of a spec with canaries and update.max_parallel_per spreads
// the canaries over the zones Consul's catalog gives the nodes: 6 nodes
// in 3 zones, 3 canaries, one in each zone.
func TestCommitSpreadsCanariesOverZones(t *testing.T) {
	srv := consultest.NewDev(t)
	st := coordinator.NewStore(srv.Client(), coordinator.DefaultPrefix)
	ctx := testkit.Context(t, time.Minute)
	zoneOf := map[string]string{}
	for _, z := range []string{"a", "b", "c"} {
		cl := consultest.NewZoneClient(t, srv, z)
		for i := 1; i <= 2; i++ {
			n := fmt.Sprintf("%s%d", z, i)
			zoneOf[n] = "zone=" + z
			if err := st.PutNode(ctx, "web", coordinator.NodeState{Node: n, State: coordinator.StateConverged, ConsulNode: cl.Name, Since: time.Now().UTC()}); err != nil {
				t.Fatal(err)
			}
		}
	}
	testkit.Eventually(t, 30*time.Second, "every node's zone in the catalog", func() bool {
		d, err := st.Domains(ctx, "web", "zone")
		return err == nil && len(d) == 6
	})
	// A release whose canaries, unspread, would leave a zone out: so the
	// spread, not chance, covers the zones.
	var s *hashspec.Spec
	for i := 0; i < 50 && s == nil; i++ {
		c := &hashspec.Spec{Container: hashspec.Container{Image: fmt.Sprintf("demo:v%d", i)}, Update: hashspec.Update{Canary: 3,
			MaxParallelPer: &hashspec.Spread{Key: "zone", Max: 1}}}
		sha, err := c.SHA()
		if err != nil {
			t.Fatal(err)
		}
		zones := map[string]bool{}
		for _, n := range coordinator.ChooseCanaries(sha, []string{"a1", "a2", "b1", "b2", "c1", "c2"}, 3) {
			zones[zoneOf[n]] = true
		}
		if len(zones) < 3 {
			s = c
		}
	}
	if s == nil {
		t.Fatal("no release of 50 has unspread canaries that leave a zone out")
	}
	if _, err := st.Commit(ctx, "web", s, "me", "commit"); err != nil {
		t.Fatal(err)
	}
	g, err := st.Read(ctx, "web", nil)
	if err != nil || g.Canaries == nil {
		t.Fatalf("canaries %+v, %v", g.Canaries, err)
	}
	per := map[string]int{}
	for _, n := range g.Canaries.Nodes {
		per[zoneOf[n]]++
	}
	if len(g.Canaries.Nodes) != 3 || per["zone=a"] != 1 || per["zone=b"] != 1 || per["zone=c"] != 1 {
		t.Fatalf("canaries %v: per zone %v, want one in each", g.Canaries.Nodes, per)
	}
}
