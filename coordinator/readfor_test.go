package coordinator

import (
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/internal/consultest"
)

// ReadFor sees what Read sees of the desired SHA and of its own node, and
// nothing of the other nodes, whatever their names share with its own.
func TestReadForMatchesRead(t *testing.T) {
	ctx := testCtx(t)
	c := consultest.NewDev(t).Client()
	st := NewStore(c, "")
	k, _ := st.Keys("web")
	if g, err := st.ReadFor(ctx, "web", "n1"); err != nil || g.Desired != nil || g.Gate().Open {
		t.Fatalf("nothing committed: %+v, %v", g, err)
	}
	if _, err := st.Commit(ctx, "web", specWith(t, "pause", 2, 1), "me", "v1"); err != nil {
		t.Fatal(err)
	}
	r2, err := st.Commit(ctx, "web", specWith(t, "pause", 2, 2), "me", "v2")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Second)
	for _, n := range []string{"n1", "n10", "n2"} {
		if err := st.PutNode(ctx, "web", NodeState{Node: n, SHA: r2.Previous, Desired: r2.SHA, State: StateWaiting, Since: now}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.RecordFailure(ctx, "web", "n2", r2.SHA, "unhealthy"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.KV().Put(&api.KVPair{Key: k.Node("n1x"), Value: []byte("garbage")}, nil); err != nil {
		t.Fatal(err)
	}
	for _, cancelled := range []bool{false, true} {
		if cancelled {
			if _, err := st.Cancel(ctx, "web", "", "stop", "me"); err != nil {
				t.Fatal(err)
			}
		}
		full, err := st.Read(ctx, "web", nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := st.ReadFor(ctx, "web", "n1")
		if err != nil {
			t.Fatal(err)
		}
		checkReadFor(t, got, full, cancelled)
	}
}

func checkReadFor(t *testing.T, got, full *GroupState, cancelled bool) {
	t.Helper()
	if !reflect.DeepEqual(got.Gate(), full.Gate()) || !reflect.DeepEqual(got.Desired, full.Desired) ||
		!reflect.DeepEqual(got.Failures, full.Failures) || !reflect.DeepEqual(got.Cancel, full.Cancel) ||
		(got.Cancel != nil) != cancelled {
		t.Fatalf("ReadFor %+v gate %+v\nRead %+v gate %+v", got, got.Gate(), full, full.Gate())
	}
	if got.Spec == nil || got.DesiredPair.ModifyIndex != full.DesiredPair.ModifyIndex {
		t.Fatalf("spec %v, desired index %d, want %d", got.Spec, got.DesiredPair.ModifyIndex, full.DesiredPair.ModifyIndex)
	}
	if len(got.Nodes) != 1 || got.Nodes[0].Node != "n1" || len(got.Problems) != 0 {
		t.Fatalf("nodes %+v problems %q: want n1's record alone and no problem", got.Nodes, got.Problems)
	}
	if len(got.History) != 1 || len(full.History) != 2 {
		t.Fatalf("history: %d entries, want the desired one alone (Read has %d)", len(got.History), len(full.History))
	}
}
