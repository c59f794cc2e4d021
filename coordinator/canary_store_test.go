package coordinator

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

// putConvergedRecords writes a converged record of no SHA for each node
// straight into Consul, as the nodes of a group before its first commit.
func putConvergedRecords(t *testing.T, c *api.Client, st *Store, group string, nodes ...string) {
	t.Helper()
	k, _ := st.Keys(group)
	for _, n := range nodes {
		b, _ := json.Marshal(NodeState{Node: n, State: StateConverged, Since: time.Now().UTC()})
		if _, err := c.KV().Put(&api.KVPair{Key: k.Node(n), Value: b}, nil); err != nil {
			t.Fatal(err)
		}
	}
}

// The commit records the canaries it chose from the nodes with a record;
// a promotion is written once, with its event; a commit of the SHA again
// waits for one of its own; a rollback promotes itself; and a promotion is
// refused under a CANCEL, with nothing written, or with no canaries.
func TestCommitRecordsCanariesAndPromote(t *testing.T) {
	ctx := testCtx(t)
	c, st := devStore(t)
	nodes := []string{"a", "b", "c", "d", "e"}
	putConvergedRecords(t, c, st, "web", nodes...)
	canary := func(n int, parallel int) (string, *GroupState) {
		t.Helper()
		s := specWith(t, "pause", 1, parallel)
		s.Update.Canary = n
		r, err := st.Commit(ctx, "web", s, "me", "commit")
		if err != nil {
			t.Fatal(err)
		}
		g, err := st.Read(ctx, "web", nil)
		if err != nil {
			t.Fatal(err)
		}
		return r.SHA, g
	}
	v1, g := canary(2, 1)
	if g.Canaries == nil || !slices.Equal(g.Canaries.Nodes, ChooseCanaries(v1, nodes, 2)) || g.Promoted != nil {
		t.Fatalf("canaries %+v, promoted %+v: want %v, none", g.Canaries, g.Promoted, ChooseCanaries(v1, nodes, 2))
	}
	if v := g.Gate(); v.State != GateOpen {
		t.Fatalf("the group's gate while no canary moved: %s, want open", v.State)
	}
	res, err := st.PromoteBy(ctx, "web", "fine", "me")
	if err != nil || res.Already || res.SHA != v1 {
		t.Fatalf("promote: %+v, %v", res, err)
	}
	if res, err := st.PromoteBy(ctx, "web", "again", "me"); err != nil || !res.Already {
		t.Fatalf("promote again: %+v, %v; want already", res, err)
	}
	log, err := st.Events(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	promotes := 0
	for _, e := range log.Events {
		if e.Kind == EventPromote && e.SHA == v1 && e.Reason == "fine" && e.Writer.Kind == WriterOperator {
			promotes++
		}
	}
	if promotes != 1 {
		t.Fatalf("%d promote events, want 1: %+v", promotes, log.Events)
	}
	canary(0, 2)
	if _, err := st.PromoteBy(ctx, "web", "", "me"); !errors.Is(err, ErrNoCanaries) {
		t.Fatalf("promote with no canaries: %v", err)
	}
	if _, g = canary(2, 1); g.Desired.SHA != v1 || g.Promoted != nil {
		t.Fatalf("v1 committed again: promotion %+v, want none (each rollout is promoted anew)", g.Promoted)
	}
	canary(0, 3)
	if _, err := st.Rollback(ctx, "web", v1, "me"); err != nil {
		t.Fatal(err)
	}
	if g, _ = st.Read(ctx, "web", nil); g.Promoted == nil || g.Promoted.By != "me" {
		t.Fatalf("rollback to v1: promotion %+v, want the rollback's", g.Promoted)
	}
	v3, _ := canary(1, 3)
	if _, err := st.Cancel(ctx, "web", v3, "no", "me"); err != nil {
		t.Fatal(err)
	}
	before, _, _ := c.KV().List("rollagent/", nil)
	if _, err := st.PromoteBy(ctx, "web", "", "me"); !errors.Is(err, ErrPromoteCancelled) {
		t.Fatalf("promote under a CANCEL: %v, want refused", err)
	}
	after, _, _ := c.KV().List("rollagent/", nil)
	if len(after) != len(before) {
		t.Fatalf("a refused promote wrote: %d keys before, %d after", len(before), len(after))
	}
}
