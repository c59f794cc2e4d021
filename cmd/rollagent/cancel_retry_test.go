package main

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/consultest"
)

// A cancel whose answer is lost after Consul applied it is tried again,
// finds its CANCEL recorded, and succeeds: a retried cancel is idempotent.
func TestCancelRetriesALostAnswer(t *testing.T) {
	srv := consultest.NewDev(t)
	if code, _, errs := runCLI(t, srv.HTTPAddr, "commit", "web", "-f", "testdata/web.json"); code != 0 {
		t.Fatal(errs)
	}
	c, faults := srv.FaultyClient()
	st := coordinator.NewStore(c, "")
	k, _ := st.Keys("web")
	faults.OnTxn(func(ops api.TxnOps) bool {
		return slices.ContainsFunc(ops, func(op *api.TxnOp) bool {
			return op.KV != nil && op.KV.Verb == api.KVSet && strings.HasPrefix(op.KV.Key, k.Cancel(""))
		})
	}, func() error { return consultest.ErrReplyLost })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := &CancelCmd{Group: "web", Reason: "test"}
	res, recorded, err := cmd.cancelRetrying(ctx, st)
	if err != nil {
		t.Fatalf("cancel with its first answer lost: %v", err)
	}
	if !res.AlreadyCancelled || !recorded {
		t.Fatalf("the retry did not find the CANCEL the lost try recorded: %+v (recorded %v)", res, recorded)
	}
	gs, err := st.Read(ctx, "web", nil)
	if err != nil || gs.Cancel == nil {
		t.Fatalf("no CANCEL after the retry: %v %+v", err, gs)
	}
}

// A cancel whose answer was lost while an agent's failure_action rolled
// the group back tries again for the SHA it meant, not the one rolled back
// to: it finds its CANCEL recorded and cancels nothing else.
func TestCancelRetryKeepsItsSHA(t *testing.T) {
	srv := consultest.NewDev(t)
	first := commitK(t, srv.HTTPAddr, 1)
	second := commitK(t, srv.HTTPAddr, 2)
	c, faults := srv.FaultyClient()
	st := coordinator.NewStore(c, "")
	k, _ := st.Keys("web")
	rollback := make(chan error, 1)
	faults.OnTxn(func(ops api.TxnOps) bool {
		return consultest.TxnHas(ops, api.KVSet, k.Cancel(second))
	}, func() error {
		// The rollback lands between the lost answer and the retry.
		_, err := coordinator.NewStore(srv.Client(), "").Rollback(context.Background(), "web", first, "agent:n1")
		rollback <- err
		return consultest.ErrReplyLost
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, recorded, err := (&CancelCmd{Group: "web", Reason: "test"}).cancelRetrying(ctx, st)
	if rerr := <-rollback; rerr != nil {
		t.Fatalf("rollback: %v", rerr)
	}
	if err != nil || res.SHA != second || !recorded || res.Desired != first {
		t.Fatalf("cancel: %+v (recorded %v), %v; want %.12s found recorded, desired moved to %.12s", res, recorded, err, second, first)
	}
	for sha, want := range map[string]bool{second: true, first: false} {
		p, _, err := srv.Client().KV().Get(k.Cancel(sha), nil)
		if err != nil || (p != nil) != want {
			t.Errorf("cancel/%.12s exists %v (%v), want %v", sha, p != nil, err, want)
		}
	}
}

// `cancel --sha` of a SHA cancelled before a new commit does not pass for
// a success: the SHA that moves now is not cancelled, and it says so.
func TestCancelOfAnEarlierCancelledSHA(t *testing.T) {
	srv := consultest.NewDev(t)
	first := commitK(t, srv.HTTPAddr, 1)
	if code, _, errs := runCLI(t, srv.HTTPAddr, "cancel", "web"); code != 0 {
		t.Fatal(errs)
	}
	second := commitK(t, srv.HTTPAddr, 2)
	code, _, errs := runCLI(t, srv.HTTPAddr, "cancel", "web", "--sha", first)
	if code == 0 || !strings.Contains(errs, second+" is, and it is NOT cancelled") {
		t.Fatalf("code %d, stderr %q; want a failure saying %.12s is not cancelled", code, errs, second)
	}
	k, _ := coordinator.NewStore(srv.Client(), "").Keys("web")
	if p, _, err := srv.Client().KV().Get(k.Cancel(second), nil); err != nil || p != nil {
		t.Fatalf("cancel/%.12s: %v %v, want none", second, p, err)
	}
}

// A cancel that cannot reach Consul at all keeps trying within --timeout,
// then says the CANCEL is not recorded, where it looked and for how long.
func TestCancelRefusedConnectionRetriesWithinTimeout(t *testing.T) {
	start := time.Now()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	code := run(ctx, []string{"--consul-addr=127.0.0.1:1", "--timeout=2s", "cancel", "web"}, &out, &errb)
	took, errs := time.Since(start), errb.String()
	t.Logf("after %s: %s", took.Round(time.Millisecond), strings.TrimSpace(errs))
	if code == 0 || took < 2*time.Second || took > 6*time.Second {
		t.Fatalf("code %d after %s, want != 0 after about 2s", code, took)
	}
	for _, want := range []string{"http://127.0.0.1:1", "is NOT recorded", "tries in 2s", "within --timeout=2s"} {
		if !strings.Contains(errs, want) {
			t.Fatalf("stderr %q does not say %q", errs, want)
		}
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("the test's own bound ended the command")
	}
}
