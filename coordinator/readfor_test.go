package coordinator

import (
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/testkit"
)

// ReadFor sees what Read sees of the desired SHA and of its own node, and
// nothing of the other nodes, whatever their names share with its own.
func TestReadForMatchesRead(t *testing.T) {
	ctx := testCtx(t)
	c, st := devStore(t)
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

// ReadForAt starts from the desired record it is given, without reading
// it again, and reads it again only if it moved since: the state is then
// the current one, as ReadFor's is.
func TestReadForAtStartsFromDesiredGiven(t *testing.T) {
	ctx := testCtx(t)
	srv := consultest.NewDev(t)
	c := srv.Client()
	st := NewStore(c, "")
	k, _ := st.Keys("web")
	counter := &testkit.Counter{}
	counted := NewStore(srv.ClientVia(counter), "")
	desiredReads := func() int { return counter.To(http.MethodGet, "/v1/kv/"+k.Desired()) }
	if _, err := st.Commit(ctx, "web", specWith(t, "pause", 2, 1), "me", "v1"); err != nil {
		t.Fatal(err)
	}
	if err := st.PutNode(ctx, "web", NodeState{Node: "n1", State: StateWaiting, Since: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	old, meta, err := c.KV().Get(k.Desired(), nil)
	if err != nil || old == nil {
		t.Fatalf("read desired: %v", err)
	}
	t.Run("as given", func(t *testing.T) {
		got, err := counted.ReadForAt(ctx, "web", "n1", Woken{pair: old, index: meta.LastIndex})
		if err != nil {
			t.Fatal(err)
		}
		full, err := st.Read(ctx, "web", nil)
		if err != nil {
			t.Fatal(err)
		}
		if n := desiredReads(); n != 0 {
			t.Fatalf("read desired %d times, want none", n)
		}
		if got.DesiredPair.ModifyIndex != old.ModifyIndex || !reflect.DeepEqual(got.Desired, full.Desired) || len(got.Nodes) != 1 {
			t.Fatalf("ReadForAt %+v, Read %+v", got, full)
		}
	})
	t.Run("moved since", func(t *testing.T) {
		res, err := st.Commit(ctx, "web", specWith(t, "pause", 2, 2), "me", "v2")
		if err != nil {
			t.Fatal(err)
		}
		got, err := counted.ReadForAt(ctx, "web", "n1", Woken{pair: old, index: meta.LastIndex})
		if err != nil {
			t.Fatal(err)
		}
		if got.Desired == nil || got.Desired.SHA != res.SHA || got.DesiredPair.ModifyIndex == old.ModifyIndex {
			t.Fatalf("ReadForAt from a desired that moved gives %+v, want SHA %s", got.Desired, res.SHA)
		}
		if n := desiredReads(); n != 1 {
			t.Fatalf("read desired %d times, want once, after the check of its index failed", n)
		}
	})
	if _, err := counted.ReadForAt(ctx, "web", "n1", Woken{pair: &api.KVPair{Key: "elsewhere"}, index: 1}); err == nil {
		t.Fatal("ReadForAt took a record that is not the group's desired")
	}
}
