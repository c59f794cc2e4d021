package coordinator

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/internal/consultest"
)

// A flood of failures of another SHA (any node's token
// may write failures/) makes every whole-group read fail with
// ErrGateUnread, and with it every failure an agent records; yet an
// agent's look (ReadFor) reads the desired SHA's records alone, so its
// gate stays open. The agent drops a failure whose record fails with an
// error that is not transient (recordPendingFailure), so the failure
// budget never counts and failure_action never fires while the rollout
// goes on. A failure must either be recorded, or its error must make the
// agent keep it and act on nothing.
func TestAGateUnreadFailureIsNotDroppedWhileTheLookIsOpen(t *testing.T) {
	ctx := testCtx(t)
	srv := consultest.NewDev(t)
	st := limitedStore(t, srv, 128<<10)
	res, err := st.Commit(ctx, "web", specWith(t, "pause", 1, 1), "me", "v1")
	if err != nil {
		t.Fatal(err)
	}
	k, _ := st.Keys("web")
	big := bytes.Repeat([]byte("x"), 100<<10)
	for i := range 2 {
		key := fmt.Sprintf("%sjunk%d", k.FailuresPrefix(strings.Repeat("b", 64)), i)
		if _, err := srv.Client().KV().Put(&api.KVPair{Key: key, Value: big}, nil); err != nil {
			t.Fatal(err)
		}
	}
	look, err := st.ReadFor(ctx, "web", "n1")
	if err != nil {
		t.Fatalf("look: %v", err)
	}
	open := look.Gate().Open
	_, err = st.RecordFailureBy(ctx, "web", "n1", "n1", res.SHA, "boom")
	t.Logf("look's gate open: %v; record: %v (transient %v, gate unread %v)", open, err, IsTransient(err), errors.Is(err, ErrGateUnread))
	if open && err != nil && !IsTransient(err) {
		t.Fatalf("the look's gate is open while a failure cannot be recorded, with an error an agent drops (not transient): %v", err)
	}
}

// Under the same flood an operator cannot commit a new
// spec (convergedOps reads the whole group), pause, resume or roll back:
// only cancel works, and the way out is deleting keys by hand.
func TestAGateUnreadFloodOfAnotherSHALeavesTheOperatorACommit(t *testing.T) {
	ctx := testCtx(t)
	srv := consultest.NewDev(t)
	st := limitedStore(t, srv, 128<<10)
	if _, err := st.Commit(ctx, "web", specWith(t, "pause", 1, 1), "me", "v1"); err != nil {
		t.Fatal(err)
	}
	k, _ := st.Keys("web")
	big := bytes.Repeat([]byte("x"), 100<<10)
	for i := range 2 {
		key := fmt.Sprintf("%sjunk%d", k.FailuresPrefix(strings.Repeat("b", 64)), i)
		if _, err := srv.Client().KV().Put(&api.KVPair{Key: key, Value: big}, nil); err != nil {
			t.Fatal(err)
		}
	}
	_, _, perr := st.PauseBy(ctx, "web", "stop", "alice")
	_, cerr := st.Commit(ctx, "web", specWith(t, "pause", 2, 1), "me", "v2")
	t.Logf("pause: %v; commit: %v", perr, cerr)
	if cerr != nil {
		t.Fatalf("an operator's commit of a new spec fails under a flood of another SHA's failures: %v", cerr)
	}
}
