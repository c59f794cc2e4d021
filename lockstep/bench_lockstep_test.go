package lockstep

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/internal/consultest"
)

// benchLockstepHandoff runs n in-process contenders, each with its own
// Session, that acquire once (the grant writes the turn's first record),
// fence their first step as rollagent does, hold benchHoldTime and
// release.
func benchLockstepHandoff(b *testing.B, srv *consultest.Server, n int) *benchResult {
	c, ctr, closeIdle := benchClient(b, srv.HTTPAddr)
	defer closeIdle()
	r := benchRun(b, c, ctr, "lockstep", "lockstep", n, benchHoldTime, func(ctx context.Context, run string) ([]benchHold, []error, time.Duration) {
		g := benchGate(b, c, run)
		prefix := "bench/" + run + "/slot"
		return benchContend(ctx, n, func(ctx context.Context, i int) (benchHold, error) {
			return lockstepTurn(ctx, c, g, prefix, name(i))
		})
	})
	if r.overlap > 1 {
		b.Errorf("lockstep: %d fenced turns overlapped with K=1", r.overlap)
	}
	return r
}

// benchNoteErrors notes a capped run in its row and fails on other errors.
func benchNoteErrors(ctx context.Context, b *testing.B, r *benchResult, errs []error) {
	if ctx.Err() != nil {
		r.note = fmt.Sprintf("capped at %s: %d of %d turns done", benchRunCap, r.holds, r.n)
		return
	}
	for _, err := range errs {
		if err != nil {
			b.Errorf("%s N=%d: %v", r.system, r.n, err)
			return
		}
	}
}

// lockstepTurn is one contender: its own session, one Acquire whose grant
// writes the turn's record, a Fence before the work (rollagent fences its
// first step like every other: the grant is no step's fence), the work,
// and Release.
func lockstepTurn(ctx context.Context, c *api.Client, g Gate, prefix, who string) (benchHold, error) {
	var hd benchHold
	s, err := NewSession(ctx, c, SessionOptions{})
	if err != nil {
		return hd, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Close(cctx)
	}()
	m, err := New(c, s, Options{Prefix: prefix, Name: who})
	if err != nil {
		return hd, err
	}
	step := &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: prefix + "-steps/" + who, Value: []byte("started")}}
	h, err := m.Acquire(ctx, g, step)
	if err != nil {
		return hd, err
	}
	hd.acq = time.Now()
	if _, err := h.Fence(ctx, step); err != nil {
		return hd, err
	}
	hd.start = time.Now()
	time.Sleep(benchHoldTime)
	hd.end = time.Now()
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer rcancel()
	return hd, h.Release(rctx)
}

// benchLockstepFailover SIGKILLs a child process that holds the slot while
// an in-process contender waits, benchFailTries times in a row, and times
// kill -> the contender's Acquire and Fence returning. The child is the one
// of child_test.go, which holds at testPrefix.
func benchLockstepFailover(b *testing.B, srv *consultest.Server) *benchFailover {
	c := srv.Client()
	g := benchGate(b, c, "failover-lockstep")
	f := &benchFailover{system: "lockstep"}
	for i := range benchFailTries {
		d, err := lockstepFailoverTry(srv, c, g, failPhase(i, DefaultCheckTTL/3))
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			f.timeouts++
		case err != nil:
			b.Errorf("failover try %d: %v", i, err)
			f.errs = append(f.errs, err.Error())
		default:
			f.tries = append(f.tries, d)
		}
		_, _ = c.KV().DeleteTree(testPrefix+"/", nil)
	}
	slices.Sort(f.tries)
	f.note = "a child process holds and is SIGKILLed 1.0-1.8 s after it acquired, across its 1 s TTL-pass cycle; in-process successor; tries run one after another"
	return f
}

// failPhase is how long try i waits before the kill: one period, plus i
// fifths of it, so that the tries kill at different points of the holder's
// liveness cycle (TTL pass or session renewal) instead of all right after
// its start.
func failPhase(i int, period time.Duration) time.Duration {
	return period + period*time.Duration(i)/benchFailTries
}

func lockstepFailoverTry(srv *consultest.Server, c *api.Client, g Gate, phase time.Duration) (time.Duration, error) {
	child, err := launchHolder(srv.HTTPAddr, g)
	if err != nil {
		return 0, err
	}
	defer child.kill()
	ctx, cancel := context.WithTimeout(context.Background(), benchTryCap+10*time.Second)
	defer cancel()
	s, err := NewSession(ctx, c, SessionOptions{})
	if err != nil {
		return 0, err
	}
	defer func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		_ = s.Close(cctx)
	}()
	m, _ := New(c, s, Options{Prefix: testPrefix, Name: "next"})
	type turn struct {
		at  time.Time
		err error
	}
	got := make(chan turn, 1)
	go func() {
		h, err := m.Acquire(ctx, g)
		if err == nil {
			_, err = h.Fence(ctx)
			at := time.Now()
			_ = h.Release(ctx)
			got <- turn{at, err}
			return
		}
		got <- turn{err: err}
	}()
	if err := benchPoll(10*time.Second, func() bool {
		hs, err := ReadHolders(c, testPrefix, nil)
		return err == nil && len(hs.Waiting) == 1
	}); err != nil {
		cancel()
		<-got
		return 0, fmt.Errorf("successor not in line: %w", err)
	}
	time.Sleep(phase)
	killed := time.Now()
	if err := child.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return 0, err
	}
	select {
	case t := <-got:
		return t.at.Sub(killed), t.err
	case <-time.After(benchTryCap):
		cancel()
		<-got
		return 0, context.DeadlineExceeded
	}
}

// benchPoll polls cond every 20ms for at most d.
func benchPoll(d time.Duration, cond func() bool) error {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("not within %s", d)
}
