package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/lockstep"
)

// fencedStep is the step n1's fence lets it take in these tests.
const fencedStep = "start new container"

// holdSlot makes node n1 of group web hold its slot toward the desired
// SHA as an agent does: a grant that writes its "replacing" record, then,
// if fenced, a fence of its step that writes it again naming the step.
func holdSlot(t *testing.T, srv *consultest.Server, fenced bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := srv.Client()
	st := coordinator.NewStore(c, coordinator.DefaultPrefix)
	k, err := st.Keys("web")
	if err != nil {
		t.Fatal(err)
	}
	gs, err := st.Read(ctx, "web", nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := lockstep.NewSession(ctx, c, lockstep.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		_ = s.Close(cctx)
	})
	m, err := lockstep.New(c, s, lockstep.Options{Prefix: k.Slot(), Name: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	g := gs.LockGate(k)
	g.Lease = time.Minute
	rec := coordinator.NodeState{Node: "n1", Desired: gs.Desired.SHA, State: coordinator.StateReplacing, Since: time.Now().UTC()}
	h, err := m.Acquire(ctx, g, nodeOp(t, st, rec))
	if err != nil {
		t.Fatal(err)
	}
	if fenced {
		rec.Fenced = fencedStep
		if _, err := h.Fence(ctx, nodeOp(t, st, rec)); err != nil {
			t.Fatal(err)
		}
	}
}

func nodeOp(t *testing.T, st *coordinator.Store, n coordinator.NodeState) *api.TxnOp {
	t.Helper()
	op, err := st.NodeOp("web", n)
	if err != nil {
		t.Fatal(err)
	}
	return op
}

// Issue 25 item 7: `cancel` says which nodes had already passed a fence
// toward the SHA and may still finish their step, and that none had when
// a node was only granted its slot (its first step's fence is still to
// come, and fails on the CANCEL).
func TestCancelNamesNodesPastTheirFence(t *testing.T) {
	tests := []struct {
		name   string
		fenced bool
		want   string
	}{
		{name: "granted only", want: "no node had passed a fence for it"},
		{name: "fenced", fenced: true, want: `n1 had passed its fence before the CANCEL and may still finish its step "` + fencedStep + `"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := consultest.NewDev(t)
			commitWeb(t, srv.HTTPAddr)
			holdSlot(t, srv, tt.fenced)
			code, out, errs := runCLI(t, srv.HTTPAddr, "cancel", "web")
			if code != 0 {
				t.Fatalf("cancel: code %d, stderr %s", code, errs)
			}
			if !strings.Contains(out, "cancelled ") || !strings.Contains(out, tt.want) {
				t.Fatalf("cancel said:\n%s\nwant it to say %q", out, tt.want)
			}
			if !tt.fenced && strings.Contains(out, "n1") {
				t.Fatalf("cancel names n1, which passed no fence:\n%s", out)
			}
		})
	}
}

// `status` shows, under the cancelled gate, the node that passed its fence
// before the CANCEL, in the table and in `-o json`'s gate.passed_fence.
func TestStatusShowsNodesPastTheirFenceUnderCancel(t *testing.T) {
	srv := consultest.NewDev(t)
	sha := commitWeb(t, srv.HTTPAddr)
	holdSlot(t, srv, true)
	if code, _, errs := runCLI(t, srv.HTTPAddr, "cancel", "web"); code != 0 {
		t.Fatalf("cancel: %s", errs)
	}
	code, out, errs := runCLI(t, srv.HTTPAddr, "status", "web")
	if code != 0 {
		t.Fatalf("status: code %d, stderr %s", code, errs)
	}
	gate, _, _ := strings.Cut(out, "\n[")
	if want := "CLOSED (cancelled)"; !strings.Contains(gate, want) || !strings.Contains(gate, `n1 had passed its fence before the CANCEL`) {
		t.Fatalf("status table does not name n1 under its %s gate:\n%s", want, out)
	}
	code, out, errs = runCLI(t, srv.HTTPAddr, "status", "web", "-o", "json")
	if code != 0 {
		t.Fatalf("status -o json: code %d, stderr %s", code, errs)
	}
	var doc statusJSON
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	want := []fencedJSON{{Node: "n1", State: coordinator.StateReplacing, Step: fencedStep}}
	got := doc.Gate.PassedFence
	if len(got) != 1 || got[0].Node != want[0].Node || got[0].State != want[0].State || got[0].Step != want[0].Step || got[0].SHA != "" {
		t.Fatalf("gate.passed_fence = %+v, want %+v (toward %.12s)", got, want, sha)
	}
}
