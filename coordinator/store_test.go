package coordinator

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/internal/consultest"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// devStore is a store on a dev agent of the test's own, and its client.
func devStore(t *testing.T) (*api.Client, *Store) {
	t.Helper()
	c := consultest.NewDev(t).Client()
	return c, NewStore(c, "")
}

func TestCancelThenCommitStartsNewRollout(t *testing.T) {
	ctx := testCtx(t)
	st := NewStore(consultest.NewDev(t).Client(), "")
	v1, v2 := specWith(t, "pause", 1, 1), specWith(t, "pause", 1, 2)
	r1, err := st.Commit(ctx, "web", v1, "me", "commit")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Cancel(ctx, "web", "", "bad", "me"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Cancel(ctx, "web", strings.Repeat("0", 64), "", "me"); err == nil {
		t.Fatal("cancel of a SHA that is not desired must fail")
	}
	r2, err := st.Commit(ctx, "web", v2, "me", "commit")
	if err != nil {
		t.Fatal(err)
	}
	g, err := st.Read(ctx, "web", nil)
	if err != nil {
		t.Fatal(err)
	}
	if v := g.Gate(); !v.Open || v.SHA != r2.SHA || v.Limit != 2 {
		t.Fatalf("new commit after cancel: gate %+v", v)
	}
	if !g.Cancelled(r1.SHA) || r2.Previous != r1.SHA {
		t.Fatalf("cancelled SHA must stay cancelled; previous = %s", r2.Previous)
	}
	if _, err := st.Rollback(ctx, "web", "", "me"); err == nil || !strings.Contains(err.Error(), "cancelled") {
		t.Fatalf("rollback to a cancelled SHA: %v, want a refusal", err)
	}
}

func TestResumeLiftsPauseOnly(t *testing.T) {
	ctx := testCtx(t)
	c, st := devStore(t)
	r, err := st.Commit(ctx, "web", specWith(t, "pause", 1, 1), "me", "commit")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Resume(ctx, "web"); err == nil {
		t.Fatal("resume of a group that is not paused must fail")
	}
	k, _ := st.Keys("web")
	for key, v := range map[string]any{k.Pause(r.SHA): Pause{SHA: r.SHA, Failures: 1}, k.Failure(r.SHA, "n1"): Failure{Node: "n1", SHA: r.SHA}} {
		b, _ := json.Marshal(v)
		if _, err := c.KV().Put(&api.KVPair{Key: key, Value: b}, nil); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := st.Read(ctx, "web", nil)
	if _, err := st.Resume(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	after, _ := st.Read(ctx, "web", nil)
	if !after.Gate().Open || len(after.Failures) != 0 {
		t.Fatalf("after resume: gate %+v failures %d", after.Gate(), len(after.Failures))
	}
	if after.DesiredPair.ModifyIndex == before.DesiredPair.ModifyIndex || after.Desired.SHA != r.SHA {
		t.Fatal("resume must touch desired (to wake waiters) and keep its SHA")
	}
}

// A rollback with no --to goes where failure_action=rollback would: the
// latest SHA that converged, past a previous one that never ran anywhere
// (a tag typo), and refuses when no SHA converged.
func TestRollbackDefaultsToLatestConverged(t *testing.T) {
	ctx := testCtx(t)
	c, st := devStore(t)
	r1, _ := st.Commit(ctx, "web", specWith(t, "pause", 1, 1), "me", "commit")
	if _, err := st.Commit(ctx, "web", specWith(t, "pause", 1, 2), "me", "commit"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Rollback(ctx, "web", "", "me"); err == nil || !strings.Contains(err.Error(), "--to") {
		t.Fatalf("rollback with nothing converged: %v, want a refusal naming --to", err)
	}
	k, _ := st.Keys("web")
	b, _ := json.Marshal(Converged{SHA: r1.SHA, At: time.Now().UTC(), Nodes: 3})
	if _, err := c.KV().Put(&api.KVPair{Key: k.Converged(r1.SHA), Value: b}, nil); err != nil {
		t.Fatal(err)
	}
	typo, _ := st.Commit(ctx, "web", specWith(t, "pause", 1, 3), "me", "commit")
	if _, err := st.Commit(ctx, "web", specWith(t, "pause", 1, 4), "me", "commit"); err != nil {
		t.Fatal(err)
	}
	res, err := st.Rollback(ctx, "web", "", "me")
	if err != nil {
		t.Fatal(err)
	}
	g, _ := st.Read(ctx, "web", nil)
	if res.SHA != r1.SHA || g.Desired.SHA != r1.SHA || g.Desired.Previous == typo.SHA || !strings.HasPrefix(g.Desired.Reason, "rollback") {
		t.Fatalf("rollback went to %s (previous %s), want the converged %s", ShortSHA(res.SHA), ShortSHA(typo.SHA), ShortSHA(r1.SHA))
	}
	if len(g.History) != 4 {
		t.Fatalf("history has %d entries, want 4 (a rollback adds none)", len(g.History))
	}
}

// A CANCEL is also written where agents from before brakes/ look for one
// and check in their grants: a group whose agents are upgraded one by one
// stops for every one of them.
func TestCancelStopsAgentsFromBeforeBrakes(t *testing.T) {
	ctx := testCtx(t)
	c, st := devStore(t)
	r, err := st.Commit(ctx, "web", specWith(t, "pause", 1, 1), "me", "commit")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Cancel(ctx, "web", "", "test", "me"); err != nil {
		t.Fatal(err)
	}
	k, _ := st.Keys("web")
	// What an old agent's grant checks: its CANCEL key absent.
	ok, _, _, err := c.Txn().Txn(api.TxnOps{{KV: &api.KVTxnOp{Verb: api.KVCheckNotExists, Key: k.LegacyCancel(r.SHA)}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ok {
		t.Fatalf("no CANCEL at %s: an agent from before brakes/ would be granted a slot", k.LegacyCancel(r.SHA))
	}
}
