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

// limitedStore is a Store on a client made by NewClient (so read limits
// apply), with the whole-tree read limit at n bytes.
func limitedStore(t *testing.T, srv *consultest.Server, n int64) *Store {
	t.Helper()
	cfg := api.DefaultConfig()
	cfg.Address, cfg.Scheme = srv.HTTPAddr, "http"
	c, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return NewStore(c, "").WithReadLimit(n)
}

// A read that cannot take what the gate is judged on fails: a CANCEL in a
// brakes/ folder over the read limit, or a failure or failure pause in a
// folder over it (any node's token may write there), never pass for
// absent, which would open the gate (an agent whose look falls back to
// Read) or let the failure budget count too few.
func TestASplitReadNeverDropsWhatTheGateIsJudgedOn(t *testing.T) {
	for _, tt := range []struct {
		name  string
		flood func(k Keys) string
		seen  func(gs *GroupState, sha string) bool
	}{
		{"brakes", func(k Keys) string { return k.LegacyOperatorPause("") },
			func(gs *GroupState, sha string) bool { return gs.Cancelled(sha) }},
		{"failures of another SHA", func(k Keys) string { return k.FailuresPrefix(strings.Repeat("b", 64)) },
			func(gs *GroupState, _ string) bool { return len(gs.Failures) == 1 }},
		{"failure pauses", func(k Keys) string { return k.Pause("") },
			func(gs *GroupState, _ string) bool { return gs.Pause != nil }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t)
			srv := consultest.NewDev(t)
			st := limitedStore(t, srv, 128<<10)
			res, err := st.Commit(ctx, "web", specWith(t, "pause", 1, 1), "me", "v1")
			if err != nil {
				t.Fatal(err)
			}
			// The records the gate is judged on: a failure that reached
			// max_failures (and so a failure pause), and a CANCEL.
			if a, err := st.RecordFailure(ctx, "web", "n1", res.SHA, "boom"); err != nil || a != ActionPause {
				t.Fatalf("failure: %v %v", a, err)
			}
			if _, err := st.Cancel(ctx, "web", res.SHA, "stop", "alice"); err != nil {
				t.Fatal(err)
			}
			k, _ := st.Keys("web")
			if tt.name == "brakes" {
				// Only brakes/ holds the CANCEL then, as for a group whose
				// agents are all from after brakes/.
				if _, err := srv.Client().KV().Delete(k.LegacyCancel(res.SHA), nil); err != nil {
					t.Fatal(err)
				}
			}
			big := bytes.Repeat([]byte("x"), 100<<10)
			for i := range 2 {
				if _, err := srv.Client().KV().Put(&api.KVPair{Key: fmt.Sprintf("%sjunk%d", tt.flood(k), i), Value: big}, nil); err != nil {
					t.Fatal(err)
				}
			}
			gs, err := st.Read(ctx, "web", nil)
			switch {
			case err != nil && !errors.Is(err, ErrGateUnread):
				t.Fatalf("read: %v, want ErrGateUnread", err)
			case err == nil && !tt.seen(gs, res.SHA):
				t.Fatalf("the read left a record out and did not fail (gate %s; problems %q)", gs.Gate().State, gs.Problems)
			}
		})
	}
}

// One node's token may write keys with long names in its own part of the
// event log: their names alone are over what a listing of names accepts,
// and a whole-group read that listed the tree at once failed, and with it
// an operator's pause and every failure an agent records.
func TestAKeyNameFloodInOneNodesLogDoesNotFailReads(t *testing.T) {
	ctx := testCtx(t)
	srv := consultest.NewDev(t)
	st := limitedStore(t, srv, 0)
	res, err := st.Commit(ctx, "web", specWith(t, "pause", 1, 1), "me", "v1")
	if err != nil {
		t.Fatal(err)
	}
	k, _ := st.Keys("web")
	name := strings.Repeat("n", 60<<10)
	var ops api.TxnOps
	for i := range 80 {
		ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: fmt.Sprintf("%s%03d%s", k.NodeEvents("n9"), i, name), Value: []byte("{}")}})
		if len(ops) == 4 {
			if ok, r, _, err := srv.Client().Txn().Txn(ops, nil); err != nil || !ok {
				t.Fatalf("flood: %v %+v", err, r)
			}
			ops = nil
		}
	}
	if a, err := st.RecordFailure(ctx, "web", "n1", res.SHA, "boom"); err != nil || a != ActionPause {
		t.Fatalf("failure under the flood: action %v, %v; want a pause", a, err)
	}
	gs, err := st.Read(ctx, "web", nil)
	if err != nil || gs.Pause == nil || gs.Gate().Open {
		t.Fatalf("read under the flood: %v; gate %+v", err, gs.Gate())
	}
}
