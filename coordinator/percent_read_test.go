package coordinator

import (
	"testing"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/internal/consultest"
)

// An agent's look, which reads its own record alone, counts the group's
// records for a percentage; `node rm` moves Keys.Membership, so a grant
// on a look made before the removal (a K of the larger group) is refused
// by Consul, and the next look means the smaller K.
func TestPercentLookAndRemoval(t *testing.T) {
	ctx := testCtx(t)
	c, st := devStore(t)
	k, _ := st.Keys("web")
	commit(t, st, "web", percentSpec(t, `"50%"`, `"50%"`))
	converge(t, st, "web", "n1", "n2", "n3", "n4")
	look := func() *GroupState {
		t.Helper()
		g, err := st.ReadFor(ctx, "web", "n1")
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	grantChecks := func(ops api.TxnOps) bool {
		t.Helper()
		ok, _, _, err := c.Txn().Txn(ops, nil)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	before := look()
	lg := before.LockGate(k)
	if before.NodeCount() != 4 || lg.Limit != 2 || before.MaxFailures() != 2 || len(lg.GrantChecks) != 1 {
		t.Fatalf("look of 4 nodes: count %d, K %d, max_failures %d, grant checks %d; want 4, 2, 2, 1",
			before.NodeCount(), lg.Limit, before.MaxFailures(), len(lg.GrantChecks))
	}
	if !grantChecks(lg.GrantChecks) {
		t.Fatal("the grant checks fail with the group unchanged")
	}
	if _, err := st.RemoveNode(ctx, "web", "n4", true, "test", "shrink"); err != nil {
		t.Fatal(err)
	}
	if grantChecks(lg.GrantChecks) {
		t.Fatal("a grant on the look from before the removal would pass, with K 2 of a group of 3")
	}
	after := look()
	lg = after.LockGate(k)
	if after.NodeCount() != 3 || lg.Limit != 1 || after.MembershipIndex == 0 || !grantChecks(lg.GrantChecks) {
		t.Fatalf("look of 3 nodes: count %d, K %d, membership %d", after.NodeCount(), lg.Limit, after.MembershipIndex)
	}
	if full := read(t, st, "web"); full.NodeCount() != 3 || full.MembershipIndex != after.MembershipIndex || full.Gate().MaxParallel != 1 {
		t.Fatalf("Read: count %d, membership %d, K %d", full.NodeCount(), full.MembershipIndex, full.Gate().MaxParallel)
	}
	// A group that grows needs no check: a K from before is smaller.
	converge(t, st, "web", "n5", "n6", "n7", "n8")
	if g := look(); g.NodeCount() != 7 || g.Gate().Limit != 3 || !grantChecks(lg.GrantChecks) {
		t.Fatalf("look of 7 nodes: count %d, K %d", g.NodeCount(), g.Gate().Limit)
	}
}

// A count needs neither the listing nor the check.
func TestCountLookReadsNoMore(t *testing.T) {
	ctx := testCtx(t)
	_, st := devStore(t)
	k, _ := st.Keys("web")
	commit(t, st, "web", percentSpec(t, `2`, `1`))
	converge(t, st, "web", "n1", "n2", "n3")
	g, err := st.ReadFor(ctx, "web", "n1")
	if err != nil {
		t.Fatal(err)
	}
	if g.NodeKeys != 0 || g.LockGate(k).GrantChecks != nil || g.Gate().Limit != 2 {
		t.Fatalf("count: node keys %d, grant checks %v, K %d", g.NodeKeys, g.LockGate(k).GrantChecks, g.Gate().Limit)
	}
}

// max_failures = "50%" of 4 nodes: the first failure records, the second
// pauses, once, with the number it meant in its reason.
func TestPercentFailureBudget(t *testing.T) {
	ctx := testCtx(t)
	st := NewStore(consultest.NewDev(t).Client(), "")
	sha := commit(t, st, "web", percentSpec(t, `1`, `"50%"`))
	converge(t, st, "web", "n1", "n2", "n3", "n4")
	for i, want := range []Action{ActionNone, ActionPause, ActionNone} {
		node := []string{"n1", "n2", "n3"}[i]
		a, err := st.RecordFailure(ctx, "web", node, sha, "unhealthy")
		if err != nil || a != want {
			t.Fatalf("failure %d (%s): %v, %v; want %v", i+1, node, a, err, want)
		}
	}
	g := read(t, st, "web")
	if g.Pause == nil || g.Pause.Failures != 2 || g.Pause.Reason != "2 failure(s) reached max_failures=50% (= 2 of 4 nodes)" {
		t.Fatalf("pause %+v: want it at 2 failures, naming 50%% of 4 nodes", g.Pause)
	}
}
