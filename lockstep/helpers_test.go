package lockstep

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/internal/consultest"
	retrykit "github.com/rollagent/rollagent/internal/retry"
	"github.com/rollagent/rollagent/internal/testkit"
	"github.com/rollagent/rollagent/internal/watch"
)

const testPrefix = "rollagent/g/slot"

// commit sets the desired key and returns a gate for it.
func commit(t testing.TB, c *api.Client, sha string, limit int) Gate {
	t.Helper()
	if _, err := c.KV().Put(&api.KVPair{Key: "rollagent/g/desired", Value: []byte(sha)}, nil); err != nil {
		t.Fatal(err)
	}
	p, _, err := c.KV().Get("rollagent/g/desired", nil)
	if err != nil || p == nil {
		t.Fatalf("read desired: %v", err)
	}
	return Gate{DesiredKey: p.Key, DesiredIndex: p.ModifyIndex, Closed: []string{"rollagent/g/cancel/" + sha}, Limit: limit}
}

// cancelGate closes g the way `rollagent cancel` does.
func cancelGate(t testing.TB, c *api.Client, g Gate) uint64 {
	t.Helper()
	p, _, err := c.KV().Get(g.DesiredKey, nil)
	if err != nil {
		t.Fatal(err)
	}
	ok, resp, _, err := c.Txn().Txn(CloseOps(p, g.Closed[0], []byte(`{"reason":"test"}`)), nil)
	if err != nil || !ok {
		t.Fatalf("cancel: ok=%v err=%v resp=%+v", ok, err, resp)
	}
	return resp.Results[1].KV.ModifyIndex
}

func newSession(t testing.TB, c *api.Client) *Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := NewSession(ctx, c, SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	return s
}

func newSem(t testing.TB, c *api.Client, name string) *Semaphore {
	t.Helper()
	m, err := New(c, newSession(t, c), Options{Prefix: testPrefix, Name: name})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// committed is a client of a dev agent of its own, the gate of sha
// committed there with limit, and a context that ends after d: how most
// tests begin.
func committed(t testing.TB, sha string, limit int, d time.Duration) (*api.Client, Gate, context.Context) {
	t.Helper()
	c := devClient(t)
	return c, commit(t, c, sha, limit), ctxFor(t, d)
}

func devClient(t testing.TB) *api.Client {
	t.Helper()
	return consultest.NewDev(t).Client()
}

// eventually polls cond every 50ms for at most d: a bounded wait, never a
// bare sleep.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	testkit.EventuallyEvery(t, d, 50*time.Millisecond, what, cond)
}

// waitInLine waits, bounded, until n contenders wait in line at
// testPrefix.
func waitInLine(t testing.TB, c *api.Client, n int, what string) {
	t.Helper()
	eventually(t, 10*time.Second, what, func() bool {
		h, err := ReadHolders(c, testPrefix, nil)
		return err == nil && len(h.Waiting) == n
	})
}

func ctxFor(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func name(i int) string { return fmt.Sprintf("n%02d", i) }

// acquireAsync runs m.Acquire in its own goroutine. The channel gets the
// hold, or nil after an error, which fails the test.
func acquireAsync(t testing.TB, ctx context.Context, m *Semaphore, g Gate, ops ...*api.TxnOp) <-chan *Hold {
	got := make(chan *Hold, 1)
	go func() {
		h, err := m.Acquire(ctx, g, ops...)
		if err != nil {
			t.Error(err)
		}
		got <- h
	}()
	return got
}

// handOver releases h and waits up to 10 s for waiter's grant, which it
// releases in turn, failing the test with why if none comes.
func handOver(t testing.TB, ctx context.Context, h *Hold, waiter <-chan *Hold, why string) {
	t.Helper()
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case h2 := <-waiter:
		if h2 == nil {
			t.FailNow()
		}
		_ = h2.Release(ctx)
	case <-time.After(10 * time.Second):
		t.Fatal(why)
	}
}

// readHolders reads the test slot's holders, once, failing the test if
// Consul does not answer.
func readHolders(t testing.TB, c *api.Client) *Holders {
	t.Helper()
	hs, err := ReadHolders(c, testPrefix, nil)
	if err != nil {
		t.Fatal(err)
	}
	return hs
}

// deadHolder is name granted a slot at g whose session then ended, as a
// node that dies mid-step leaves it: its claim stays, its holder key goes.
func deadHolder(t *testing.T, ctx context.Context, c *api.Client, g Gate, name string) *Semaphore {
	t.Helper()
	dead := newSem(t, c, name)
	if _, err := dead.Acquire(ctx, g); err != nil {
		t.Fatal(err)
	}
	endSession(t, dead.s)
	return dead
}

// wantGrantedAfterRelease fails the test if waiter is granted while h
// holds (within a second), or is not granted within 10 s of h's release.
func wantGrantedAfterRelease(t *testing.T, ctx context.Context, waiter <-chan *Hold, h *Hold, whileHeld, notAfter string) {
	t.Helper()
	select {
	case <-waiter:
		t.Fatal(whileHeld)
	case <-time.After(time.Second):
	}
	handOver(t, ctx, h, waiter, notAfter)
}

// watchList calls seen with every answer of a blocking list of prefix, its
// index and when it came, until ctx ends: a failed query is tried again
// after 10 ms.
func watchList(ctx context.Context, c *api.Client, prefix string, seen func(ps api.KVPairs, index uint64, at time.Time)) {
	opts := watch.Options{Backoff: retrykit.NewSteady(10*time.Millisecond, 10*time.Millisecond)}
	watch.Run(ctx, opts, func(ctx context.Context, index uint64) (uint64, bool, error) {
		ps, meta, err := c.KV().List(prefix, (&api.QueryOptions{WaitIndex: index, WaitTime: 10 * time.Second}).WithContext(ctx))
		if err != nil {
			return 0, false, err
		}
		seen(ps, meta.LastIndex, time.Now())
		return meta.LastIndex, false, nil
	})
}
