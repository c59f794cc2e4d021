package lockstep

// BenchmarkLockstep compares lockstep with `consul lock -n 1` and
// api.Semaphore on one Consul dev agent (internal/benchkit/lockbench is the
// harness; this file lends it lockstep's turn and failover). Run it with:
//
//	go test -run '^$' -bench . -benchtime 1x -timeout 60m ./lockstep/
//
// Set LOCKSTEP_BENCH_MD to a file, such as BENCHMARKS.md, to have the
// report written there too.

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/internal/benchkit"
	"github.com/rollagent/rollagent/internal/benchkit/lockbench"
	"github.com/rollagent/rollagent/internal/consultest"
)

func BenchmarkLockstep(b *testing.B) {
	lockbench.Benchmark(b, lockbench.Lockstep{Round: benchRound, Failover: benchFailover})
}

// benchGate is the gate of the round named run.
func benchGate(tb testing.TB, c *api.Client, run string) Gate {
	d := lockbench.PutDesired(tb, c, run)
	return Gate{DesiredKey: d.Key, DesiredIndex: d.Index, Closed: []string{d.Cancel}, Limit: 1}
}

// benchRound is the turn of a contender of the round named run.
func benchRound(tb testing.TB, c *api.Client, run string) lockbench.Turn {
	g, prefix := benchGate(tb, c, run), lockbench.Key(run, "slot")
	return func(ctx context.Context, who string) (lockbench.Hold, error) {
		return lockstepTurn(ctx, c, g, prefix, who)
	}
}

// lockstepTurn is one contender: its own session, one Acquire whose grant
// writes the turn's record, a Fence before the work (rollagent fences its
// first step like every other: the grant is no step's fence), the work,
// and Release.
func lockstepTurn(ctx context.Context, c *api.Client, g Gate, prefix, who string) (lockbench.Hold, error) {
	var hd lockbench.Hold
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
	hd.Acq = time.Now()
	if _, err := h.Fence(ctx, step); err != nil {
		return hd, err
	}
	hd.Start = time.Now()
	time.Sleep(lockbench.HoldTime)
	hd.End = time.Now()
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer rcancel()
	return hd, h.Release(rctx)
}

// benchFailover is lockstep's failover try: a child process (the one of
// child_test.go, which holds at testPrefix) holds the slot while an
// in-process contender waits, and is SIGKILLed; the try times the kill to
// the contender's Acquire and Fence returning.
func benchFailover(tb testing.TB, srv *consultest.Server) lockbench.FailoverTry {
	c := srv.Client()
	g := benchGate(tb, c, "failover-lockstep")
	return func(i int) (time.Duration, error) {
		defer func() { _, _ = c.KV().DeleteTree(testPrefix+"/", nil) }()
		return lockstepFailoverTry(srv, c, g, lockbench.FailPhase(i, DefaultCheckTTL/3))
	}
}

func lockstepFailoverTry(srv *consultest.Server, c *api.Client, g Gate, phase time.Duration) (time.Duration, error) {
	child, err := launchHolder(srv.HTTPAddr, g)
	if err != nil {
		return 0, err
	}
	defer child.kill()
	ctx, cancel := context.WithTimeout(context.Background(), lockbench.TryCap+10*time.Second)
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
	if !benchkit.Poll(10*time.Second, func() bool {
		hs, err := ReadHolders(c, testPrefix, nil)
		return err == nil && len(hs.Waiting) == 1
	}) {
		cancel()
		<-got
		return 0, fmt.Errorf("successor not in line within %s", 10*time.Second)
	}
	time.Sleep(phase)
	killed := time.Now()
	if err := child.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return 0, err
	}
	select {
	case t := <-got:
		return t.at.Sub(killed), t.err
	case <-time.After(lockbench.TryCap):
		cancel()
		<-got
		return 0, context.DeadlineExceeded
	}
}
