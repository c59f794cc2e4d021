package coordinator

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/lockstep"
)

// floodSlotKeys writes n slot keys of size bytes each under k's slot, as
// a node's token may (the .slots/ folder is shared by every node).
func floodSlotKeys(t *testing.T, srv *consultest.Server, k Keys, n, size int) {
	t.Helper()
	floodSlotKeysFrom(t, srv, k, 0, n, size)
}

// floodSlotKeysFrom writes n slot keys numbered from, as floodSlotKeys.
func floodSlotKeysFrom(t *testing.T, srv *consultest.Server, k Keys, from, n, size int) {
	t.Helper()
	v := fmt.Appendf(nil, `{"name":"flood","claim":{"session":"gone","lost":true},"pad":%q}`, strings.Repeat("x", size))
	batch := max(1, min(64, (128<<10)/len(v))) // a transaction's body is bounded too
	for first := from; first < from+n; first += batch {
		if batch == 1 {
			if _, err := srv.Client().KV().Put(&api.KVPair{Key: lockstep.SlotKey(k.Slot(), first), Value: v}, nil); err != nil {
				t.Fatal(err)
			}
			continue
		}
		var ops api.TxnOps
		for i := first; i < min(first+batch, from+n); i++ {
			ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: lockstep.SlotKey(k.Slot(), i), Value: v}})
		}
		if ok, _, _, err := srv.Client().Txn().Txn(ops, nil); err != nil || !ok {
			t.Fatalf("write slot keys from %d: ok=%v %v", first, ok, err)
		}
	}
}

// lockHolderKey makes node's holder key under k's slot, locked by a new
// session, as a grant does, and returns the session.
func lockHolderKey(t *testing.T, srv *consultest.Server, k Keys, node string) string {
	t.Helper()
	c := srv.Client()
	sess, _, err := c.Session().Create(&api.SessionEntry{Name: "holder " + node}, nil)
	if err != nil {
		t.Fatal(err)
	}
	key := lockstep.HolderKey(k.Slot(), node, sess)
	v := fmt.Appendf(nil, `{"name":%q,"state":"holding"}`, node)
	if ok, _, err := c.KV().Acquire(&api.KVPair{Key: key, Value: v, Session: sess}, nil); err != nil || !ok {
		t.Fatalf("lock %s: ok=%v %v", key, ok, err)
	}
	return sess
}

// A split read reads slot keys under a cap of their own: more of them
// than a split read takes (any node's token may write the shared
// .slots/ folder, and its keys sort first) never push the holder keys
// out of the read, and the ones left unread are named.
func TestSplitReadSlotKeysDoNotCrowdOutHolders(t *testing.T) {
	ctx := testCtx(t)
	srv := consultest.NewDev(t)
	st := limitedStore(t, srv, 32<<10)
	if _, err := st.Commit(ctx, "web", specWith(t, "pause", 1, 1), "me", "v1"); err != nil {
		t.Fatal(err)
	}
	k, _ := st.Keys("web")
	floodSlotKeys(t, srv, k, maxSlotNumbers+maxSlotKeys+10, 0)
	sess := lockHolderKey(t, srv, k, "n1")
	gs, err := st.Read(ctx, "web", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !gs.Holders.Live(sess) {
		t.Errorf("n1's holder key was not read: holding %v", gs.Holders.Holding)
	}
	if all := strings.Join(gs.Problems, "\n"); !strings.Contains(all, "more slot keys than") {
		t.Errorf("the problems do not name the slot keys left unread: %q", gs.Problems)
	}
}

// A split read caps the slot keys it reads by their number, lowest
// first, as grants take them, not by the text of their keys: a flood
// numbered from 10000 (whose keys sort before "2") leaves the claim in
// slot 2 read.
func TestSplitReadCapsSlotKeysByNumber(t *testing.T) {
	ctx := testCtx(t)
	srv := consultest.NewDev(t)
	st := limitedStore(t, srv, 32<<10)
	if _, err := st.Commit(ctx, "web", specWith(t, "pause", 1, 1), "me", "v1"); err != nil {
		t.Fatal(err)
	}
	k, _ := st.Keys("web")
	floodSlotKeysFrom(t, srv, k, 10000, maxSlotNumbers+10, 0)
	claim := []byte(`{"name":"n1","session":"s1","claim":{"session":"s1","since":"2020-01-01T00:00:00Z","until":"2020-01-01T00:01:00Z"}}`)
	if _, err := srv.Client().KV().Put(&api.KVPair{Key: lockstep.SlotKey(k.Slot(), 2), Value: claim}, nil); err != nil {
		t.Fatal(err)
	}
	gs, err := st.Read(ctx, "web", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := gs.Holders.ClaimOf("n1"); !ok {
		t.Errorf("the split read missed n1's claim in slot 2: problems %q", gs.Problems)
	}
}

// A look whose holder keys are over what it accepts reads the slot keys
// even when the holders record is absent (written by no grant, or
// removed): the node's own claim, kept in its slot key, is still seen.
func TestLookWithoutRecordReadsSlotKeys(t *testing.T) {
	srv, k := flooded(t)
	claim := []byte(`{"name":"n1","session":"s1","claim":{"session":"s1","since":"2020-01-01T00:00:00Z","until":"2020-01-01T00:01:00Z"}}`)
	if _, err := srv.Client().KV().Put(&api.KVPair{Key: lockstep.SlotKey(k.Slot(), 0), Value: claim}, nil); err != nil {
		t.Fatal(err)
	}
	c, _ := countedClient(t, srv)
	gs, err := NewStore(c, "").ReadFor(testCtx(t), "web", "n1")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := gs.Holders.ClaimOf("n1"); !ok {
		t.Errorf("the look missed n1's claim in its slot key: claims %v, problems %q", gs.Holders.Claims, gs.Problems)
	}
}

// A look whose slot keys are over what it accepts (any node's token may
// write the shared .slots/ folder) reads the holders record without them
// and names them in a problem, rather than failing every look.
func TestLookBoundsSlotKeyFlood(t *testing.T) {
	srv, k := flooded(t)
	record := []byte(`{"holders":{},"claims":{"n1":{"session":"s1","since":"2020-01-01T00:00:00Z","until":"2020-01-01T00:01:00Z"}}}`)
	if _, err := srv.Client().KV().Put(&api.KVPair{Key: lockstep.HoldersKey(k.Slot()), Value: record}, nil); err != nil {
		t.Fatal(err)
	}
	floodSlotKeys(t, srv, k, 8, 400<<10)
	c, counter := countedClient(t, srv)
	gs, err := NewStore(c, "").ReadFor(testCtx(t), "web", "n1")
	if err != nil {
		t.Fatalf("a flood of slot keys failed the look: %v", err)
	}
	if n := counter.Bytes(); n > 3*lookLimit+(64<<10) {
		t.Fatalf("one look downloaded %d bytes, over thrice the %d each of its reads accepts", n, lookLimit)
	}
	if _, ok := gs.Holders.ClaimOf("n1"); !ok {
		t.Errorf("the look missed n1's claim in the record: %v", gs.Holders.Claims)
	}
	if all := strings.Join(gs.Problems, "\n"); !strings.Contains(all, "the slot keys are over") {
		t.Errorf("the look's problems do not name the slot keys: %q", gs.Problems)
	}
}
