package coordinator

import (
	"fmt"
	"testing"

	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/consultest"
)

// shrinkRelease is a spec whose max_failures is 50% of the group.
func shrinkRelease(t *testing.T, tag, action string) *hashspec.Spec {
	t.Helper()
	js := fmt.Sprintf(`{"name":"web","container":{"image":"demo:%s"},"update":{"failure_action":%q,"max_failures":"50%%","max_parallel":1}}`, tag, action)
	s, _, err := hashspec.Load([]byte(js), hashspec.FormatJSON, "fixture")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// shrinkGroup commits a release that converges on n1..n4 (a rollback's
// target) and then a bad one under action, and returns the bad SHA.
func shrinkGroup(t *testing.T, st *Store, action string) string {
	t.Helper()
	commit(t, st, "web", shrinkRelease(t, "good", action))
	converge(t, st, "web", "n1", "n2", "n3", "n4")
	return commit(t, st, "web", shrinkRelease(t, "bad", action))
}

func removeNodes(t *testing.T, st *Store, nodes ...string) {
	t.Helper()
	for _, n := range nodes {
		if _, err := st.RemoveNode(testCtx(t), "web", n, true, "me", "gone"); err != nil {
			t.Fatal(err)
		}
	}
}

// actionTaken reads from Consul what failure_action left for bad: its
// pause record, or desired moved off it.
func actionTaken(t *testing.T, st *Store, bad string) Action {
	t.Helper()
	g := read(t, st, "web")
	k := g.keys(t)
	switch {
	case g.byKey[k.Pause(bad)] != nil:
		return ActionPause
	case g.Desired.SHA != bad:
		return ActionRollback
	}
	return ActionNone
}

// A failure under a percentage of max_failures is counted against the
// group as read: a `node rm` between the read and the write lowers the
// threshold, so the write fails its check of membership and is counted
// again, and the failure that reaches the group's new number acts.
func TestFailureTxnChecksMembershipAsRead(t *testing.T) {
	for _, action := range []string{"pause", "rollback"} {
		t.Run(action, func(t *testing.T) {
			st := NewStore(consultest.NewDev(t).Client(), "")
			bad := shrinkGroup(t, st, action)
			stale := read(t, st, "web") // 4 nodes: 50% is 2
			removeNodes(t, st, "n3", "n4")
			ops, a := stale.failureTxn(stale.keys(t), Failure{Node: "n1", SHA: bad, Error: "unhealthy"}, "n1")
			if _, conflict, err := st.txn(testCtx(t), ops); !conflict || a != ActionNone {
				t.Fatalf("failure written on a read from before a node rm: action %v, err %v; want a conflict", a, err)
			}
			if got := actionTaken(t, st, bad); got != ActionNone {
				t.Fatalf("after the refused write: %v in Consul, want nothing", got)
			}
			want := map[string]Action{"pause": ActionPause, "rollback": ActionRollback}[action]
			if a, err := st.RecordFailure(testCtx(t), "web", "n1", bad, "unhealthy"); err != nil || a != want {
				t.Fatalf("RecordFailure = %v, %v; want %v: 1 failure reaches 50%% of 2 nodes", a, err, want)
			}
			if got := actionTaken(t, st, bad); got != want {
				t.Errorf("Consul holds %v, want %v", got, want)
			}
		})
	}
}

// A shrink that brings the threshold down to the failures already counted
// fires nothing by itself: under pause, the gate closes at the next look
// (failureBudgetRule) with no pause record yet; under rollback, the gate
// stays open. In both, the next failure write of the desired SHA (even a
// counted node's repeat) acts, once.
func TestShrinkOntoTheBudget(t *testing.T) {
	for _, action := range []string{"pause", "rollback"} {
		t.Run(action, func(t *testing.T) {
			st := NewStore(consultest.NewDev(t).Client(), "")
			bad := shrinkGroup(t, st, action)
			if a, err := st.RecordFailure(testCtx(t), "web", "n1", bad, "unhealthy"); err != nil || a != ActionNone {
				t.Fatalf("first failure of 4 nodes: %v, %v; want none (50%% is 2)", a, err)
			}
			removeNodes(t, st, "n3", "n4")
			g := read(t, st, "web")
			if paused := g.Gate().State == GatePaused; paused != (action == "pause") {
				t.Errorf("gate %+v after the shrink: paused %v, want %v", g.Gate(), paused, action == "pause")
			}
			if got := actionTaken(t, st, bad); got != ActionNone {
				t.Fatalf("the shrink alone left %v in Consul, want nothing", got)
			}
			want := map[string]Action{"pause": ActionPause, "rollback": ActionRollback}[action]
			if a, err := st.RecordFailure(testCtx(t), "web", "n1", bad, "unhealthy again"); err != nil || a != want {
				t.Fatalf("the next failure write: %v, %v; want %v", a, err, want)
			}
			if a, err := st.RecordFailure(testCtx(t), "web", "n2", bad, "unhealthy"); err != nil || a != ActionNone {
				t.Errorf("a failure after the action: %v, %v; want none (it acts once)", a, err)
			}
			if got := actionTaken(t, st, bad); got != want {
				t.Errorf("Consul holds %v, want %v", got, want)
			}
		})
	}
}
