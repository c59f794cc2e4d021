package lockstep

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

func TestAcquireWaitsForRelease(t *testing.T) {
	c, g, ctx := committed(t, "sha1", 1, 30*time.Second)
	a, b := newSem(t, c, "a"), newSem(t, c, "b")
	ha, err := a.Acquire(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	got := acquireAsync(t, ctx, b, g)
	select {
	case <-got:
		t.Fatal("second contender acquired while the first held the only slot")
	case <-time.After(500 * time.Millisecond):
	}
	if err := ha.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case hb := <-got:
		if hb == nil {
			t.Fatal("no hold")
		}
		if err := hb.Release(ctx); err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("release did not hand the slot on")
	}
	if err := ha.Release(ctx); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("second release: %v, want ErrNotHeld", err)
	}
}

// watched is what watchCounted saw: the most names counted at once, and
// the first read in which an older agent (olderCounted) would not have
// counted a name this version counted, "" for none.
type watched struct {
	most   int
	missed string
}

// watchCounted follows the holders at testPrefix with blocking queries
// until ctx ends, and then sends what it saw.
func watchCounted(ctx context.Context, t testing.TB, c *api.Client) <-chan watched {
	out := make(chan watched, 1)
	go func() {
		var w watched
		watchList(ctx, c, HoldersKey(testPrefix), func(ps api.KVPairs, index uint64, _ time.Time) {
			now := ParseHolders(testPrefix, ps).Counted()
			w.most = max(w.most, len(now))
			older := olderCounted(t, ps)
			for _, n := range now {
				if !slices.Contains(older, n) && w.missed == "" {
					w.missed = fmt.Sprintf("at index %d this version counted %v, an older agent %v", index, now, older)
				}
			}
		})
		out <- w
	}()
	return out
}

type interval struct {
	name       string
	start, end time.Time
}

// maxOverlap is the largest number of intervals open at one instant.
func maxOverlap(iv []interval) int {
	type ev struct {
		at    time.Time
		delta int
	}
	var evs []ev
	for _, i := range iv {
		evs = append(evs, ev{i.start, 1}, ev{i.end, -1})
	}
	sort.Slice(evs, func(a, b int) bool {
		if evs[a].at.Equal(evs[b].at) {
			return evs[a].delta < evs[b].delta
		}
		return evs[a].at.Before(evs[b].at)
	})
	cur, best := 0, 0
	for _, e := range evs {
		cur += e.delta
		best = max(best, cur)
	}
	return best
}

// Never more than K hold, and every contender is served, at each K, with
// slots that end with their session and with claims (Gate.Lease), as
// agents take them: at K = 10 releases and grants overlap all the time.
func TestStressNeverMoreThanK(t *testing.T) {
	c := devClient(t)
	for _, k := range []int{1, 2, 3, 10} {
		for _, lease := range []time.Duration{0, time.Minute} {
			t.Run(fmt.Sprintf("K%d-lease%s", k, lease), func(t *testing.T) {
				g := commit(t, c, fmt.Sprintf("stress-%d-%s", k, lease), k)
				g.Lease = lease
				stress(t, c, g, max(20, 4*k))
			})
		}
	}
}

// stress runs n contenders through one Acquire and Release each and
// fails unless every one held and never more than g's K at once.
func stress(t *testing.T, c *api.Client, g Gate, n int) {
	stressVia(t, c, c, g, n)
}

// stressVia is stress with the contenders on client via, and the
// monitor and the checks on c.
func stressVia(t *testing.T, c, via *api.Client, g Gate, n int) {
	ctx := ctxFor(t, 2*time.Minute)
	wctx, stop := context.WithCancel(ctx)
	seen := watchCounted(wctx, t, c)
	var mu sync.Mutex
	var log []interval
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		m := newSem(t, via, name(i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, err := m.Acquire(ctx, g)
			if err != nil {
				t.Errorf("%s: %v", m.opts.Name, err)
				return
			}
			start := time.Now()
			time.Sleep(time.Duration(5+rand.IntN(40)) * time.Millisecond)
			end := time.Now()
			if err := h.Release(ctx); err != nil {
				t.Errorf("%s release: %v", m.opts.Name, err)
			}
			mu.Lock()
			log = append(log, interval{m.opts.Name, start, end})
			mu.Unlock()
		}()
	}
	wg.Wait()
	if len(log) != n {
		t.Fatalf("%d of %d contenders got the slot", len(log), n)
	}
	if got := maxOverlap(log); got > g.Limit {
		t.Fatalf("%d held at once, K=%d", got, g.Limit)
	}
	stop()
	w := <-seen
	if w.most > g.Limit {
		t.Fatalf("Consul's records counted %d at once, K=%d", w.most, g.Limit)
	}
	if w.missed != "" {
		t.Fatalf("an older agent would not count every claim: %s", w.missed)
	}
	h, err := ReadHolders(c, testPrefix, nil)
	if err != nil || len(h.Holding) != 0 || len(h.Counted()) != 0 {
		t.Fatalf("after every release: %+v, %v", h, err)
	}
}

func TestCancelStopsEveryWaiter(t *testing.T) {
	c, g, ctx := committed(t, "sha-c", 1, time.Minute)
	holder, err := newSem(t, c, "holder").Acquire(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 5)
	for i := 0; i < 5; i++ {
		m := newSem(t, c, name(i))
		go func() {
			h, err := m.Acquire(ctx, g)
			if h != nil {
				_ = h.Release(ctx)
			}
			errs <- err
		}()
	}
	waitInLine(t, c, 5, "5 waiters in line")
	cancelIdx := cancelGate(t, c, g)
	for i := 0; i < 5; i++ {
		select {
		case err := <-errs:
			if !errors.Is(err, ErrCancelled) {
				t.Fatalf("waiter got %v, want ErrCancelled", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a waiter did not stop after the cancel")
		}
	}
	if _, err := holder.Fence(ctx); !errors.Is(err, ErrCancelled) {
		t.Fatalf("holder fence after cancel: %v, want ErrCancelled", err)
	}
	assertNoGrantAfter(t, c, cancelIdx, holder)
}

// assertNoGrantAfter checks from the records that only want still holds,
// that no holder key and no holders record was written after index, and
// that no contender key was rewritten after it (a grant deletes its key).
func assertNoGrantAfter(t *testing.T, c *api.Client, index uint64, want *Hold) {
	t.Helper()
	pairs, _, err := c.KV().List(testPrefix+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pairs {
		if p.ModifyIndex > index {
			t.Fatalf("%s changed at %d, after the cancel at %d", p.Key, p.ModifyIndex, index)
		}
	}
	if p, _, err := c.KV().Get(want.m.hkey, nil); err != nil || p == nil || p.Session != want.m.s.ID() {
		t.Fatalf("the holder's key %s is not locked by its session: %+v, %v", want.m.hkey, p, err)
	}
	h, err := ReadHolders(c, testPrefix, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Holding) != 1 {
		t.Fatalf("holders after cancel: %+v", h.Holding)
	}
}

func TestNewDesiredSupersedesWaiters(t *testing.T) {
	c, g, ctx := committed(t, "old", 1, time.Minute)
	h, err := newSem(t, c, "holder").Acquire(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	w := newSem(t, c, "waiter")
	go func() {
		_, err := w.Acquire(ctx, g)
		done <- err
	}()
	eventually(t, 10*time.Second, "waiter in line", func() bool {
		hs, err := ReadHolders(c, testPrefix, nil)
		return err == nil && len(hs.Waiting) == 1
	})
	commit(t, c, "new", 1)
	select {
	case err := <-done:
		if !errors.Is(err, ErrSuperseded) {
			t.Fatalf("got %v, want ErrSuperseded", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waiter kept waiting for a superseded SHA")
	}
	if _, err := h.Fence(ctx); !errors.Is(err, ErrSuperseded) {
		t.Fatalf("fence: %v, want ErrSuperseded", err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatalf("release after supersede: %v", err)
	}
}

func TestFenceFailsAfterSessionDestroyed(t *testing.T) {
	c, g, ctx := committed(t, "sha-f", 1, 30*time.Second)
	m := newSem(t, c, "a")
	h, err := m.Acquire(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	mark := &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: "rollagent/g/nodes/a", Value: []byte("replacing")}}
	if _, err := h.Fence(ctx, mark); err != nil {
		t.Fatalf("fence while held: %v", err)
	}
	if _, err := c.Session().Destroy(m.s.ID(), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.KV().Delete("rollagent/g/nodes/a", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Fence(ctx, mark); !errors.Is(err, ErrSessionLost) {
		t.Fatalf("fence after destroy: %v, want ErrSessionLost", err)
	}
	if p, _, _ := c.KV().Get("rollagent/g/nodes/a", nil); p != nil {
		t.Fatal("a failed fence wrote its ops")
	}
	select {
	case <-h.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("Lost did not close after the session was destroyed")
	}
}

// Lost is for losing a hold, not for giving it back.
func TestReleaseDoesNotCloseLost(t *testing.T) {
	c := devClient(t)
	g := commit(t, c, "sha-l", 1)
	m := newSem(t, c, "a")
	ctx := ctxFor(t, time.Minute)
	for i := 0; i < 5; i++ {
		h, err := m.Acquire(ctx, g)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case <-h.Lost():
			t.Fatalf("round %d: Lost closed after a clean Release", i)
		case <-time.After(200 * time.Millisecond): // the watcher would have seen the delete by now
		}
	}
}

// A holders record that is not JSON, written by someone else, stalls no
// one and lets no one in early: the holder keys decide who holds, a grant
// or a release rewrites the record by CAS, and K still holds meanwhile.
func TestHoldersRecordNotJSON(t *testing.T) {
	c := devClient(t)
	g := commit(t, c, "sha1", 1)
	garble := func() {
		t.Helper()
		if _, err := c.KV().Put(&api.KVPair{Key: testPrefix + "/" + holdersKey, Value: []byte("{holders")}, nil); err != nil {
			t.Fatal(err)
		}
	}
	a, b := newSem(t, c, "a"), newSem(t, c, "b")
	ctx := ctxFor(t, 30*time.Second)
	garble()
	ha, err := a.Acquire(ctx, g)
	if err != nil {
		t.Fatalf("acquire over an unreadable record: %v", err)
	}
	garble()
	got := acquireAsync(t, ctx, b, g)
	select {
	case <-got:
		t.Fatal("a second contender acquired while the record was unreadable and the only slot held")
	case <-time.After(time.Second):
	}
	if err := ha.Release(ctx); err != nil {
		t.Fatalf("release over an unreadable record: %v", err)
	}
	var hb *Hold
	select {
	case hb = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("release did not hand the slot on")
	}
	if hb == nil {
		t.Fatal("no hold")
	}
	if err := hb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	h, err := ReadHolders(c, testPrefix, nil)
	if err != nil || h.Problem != "" || len(h.Holding) != 0 {
		t.Fatalf("after both released: %+v, %v", h, err)
	}
}
