package lockstep

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/testkit"
)

// Waiters get the slot in the order they joined the line, whoever holds it
// when they join, and a waiter that leaves the line (its Acquire ends) does
// not hold up the ones behind it.
func TestGrantsInLineOrder(t *testing.T) {
	c, g, ctx := committed(t, "fifo", 1, time.Minute)
	first, err := newSem(t, c, "first").Acquire(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	quitter, quit := context.WithCancel(ctx)
	for i := range 6 {
		m := newSem(t, c, name(i))
		wctx := ctx
		if i == 2 {
			wctx = quitter
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, err := m.Acquire(wctx, g)
			if err != nil {
				if wctx != quitter {
					t.Errorf("%s: %v", m.opts.Name, err)
				}
				return
			}
			mu.Lock()
			order = append(order, m.opts.Name)
			mu.Unlock()
			if err := h.Release(ctx); err != nil {
				t.Errorf("%s release: %v", m.opts.Name, err)
			}
		}()
		// Join one at a time, so that the line's order is known.
		waitInLine(t, c, i+1, name(i)+" in line")
	}
	quit()
	waitInLine(t, c, 5, "the quitter out of line")
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if want := []string{"n00", "n01", "n03", "n04", "n05"}; !slices.Equal(order, want) {
		t.Fatalf("granted in order %v, want %v", order, want)
	}
}

// A waiter watches the one ahead of it by key. If that one is granted,
// releases and joins again with the same session while the waiter is not
// looking, its key is back under the same name but behind the waiter in
// line: the waiter must not wait for it.
func TestWaitAheadDropsAPredecessorThatCameBack(t *testing.T) {
	c := devClient(t)
	ctx := ctxFor(t, 30*time.Second)
	p, w := newSem(t, c, "pred"), newSem(t, c, "waiter")
	if _, err := p.enqueue(ctx, nil); err != nil {
		t.Fatal(err)
	}
	snap, err := p.read(ctx, p.opts.Prefix, 0)
	if err != nil {
		t.Fatal(err)
	}
	ahead := slices.Clone(snap.contenders)
	p.dequeue()
	if _, err := p.enqueue(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := w.enqueue(ctx, nil); err != nil {
		t.Fatal(err)
	}
	for _, whole := range []bool{true, false} {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		head, _, err := w.waitAhead(wctx, ahead, whole)
		cancel()
		if err != nil {
			t.Fatalf("whole=%v: waited for a predecessor that had come back behind: %v", whole, err)
		}
		// Only a waiter that read the whole line knows no one else was
		// ahead; one that knew its predecessor from the join reads it now.
		if head != whole {
			t.Fatalf("whole=%v: head=%v", whole, head)
		}
	}
}

// A contender learns who joined just before it from the transaction that
// puts it in line, and waits on that one without listing the line: when
// every node joins at once, as at the start of a rollout, a listing each
// would read O(N) bytes. The order stays first come, first served.
func TestJoinFindsItsPredecessorWithoutListing(t *testing.T) {
	srv := consultest.NewDev(t)
	c := srv.Client()
	lc, log := testkit.CountedClient(srv)
	g := commit(t, c, "tail", 1)
	ctx := ctxFor(t, 30*time.Second)
	first, err := newSem(t, c, "first").Acquire(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	var gots []<-chan *Hold
	for i := range 4 {
		gots = append(gots, acquireAsync(t, ctx, newSem(t, lc, fmt.Sprintf("w%d", i)), g))
		waitInLine(t, c, i+1, fmt.Sprintf("waiter %d in line", i))
	}
	if n := nonBlocking(log, "/v1/kv/"+testPrefix+"/"); n != 0 {
		t.Fatalf("joiners listed the line %d times, want none", n)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for i, got := range gots {
		var h *Hold
		select {
		case h = <-got:
		case <-time.After(10 * time.Second):
			t.Fatalf("waiter %d not granted after those ahead of it released", i)
		}
		if h == nil {
			t.FailNow()
		}
		for j, other := range gots[i+1:] {
			select {
			case <-other:
				t.Fatalf("waiter %d granted before waiter %d released", i+1+j, i)
			default:
			}
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// A waiter that finds the key of the waiter ahead of it gone tells from the
// holders record's latest grant whether that one was granted and released,
// so that it heads the line without listing it, or left the line without a
// grant, so that it must read the line.
func TestWaiterTellsAReleaseFromALeaver(t *testing.T) {
	srv := consultest.NewDev(t)
	c := srv.Client()
	g := commit(t, c, "last", 1)
	ctx := ctxFor(t, 30*time.Second)
	noOps := Writes{Grant: func() api.TxnOps { return nil }}
	a := newSem(t, c, "a")
	ha, err := a.Acquire(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	b, w, leaver, behind := newSem(t, c, "b"), newSem(t, c, "w"), newSem(t, c, "leaver"), newSem(t, c, "behind")
	jb, err := b.enqueue(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	jw, err := w.enqueue(ctx, nil)
	if err != nil || jw.pred == nil || jw.pred.Session != b.s.ID() {
		t.Fatalf("w's join: %+v, %v; want b ahead", jw, err)
	}
	if err := ha.Release(ctx); err != nil {
		t.Fatal(err)
	}
	hb, err := b.waitTurn(ctx, g, noOps, jb)
	if err != nil {
		t.Fatal(err)
	}
	if err := hb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	head, _, err := w.waitAhead(ctx, []contender{*jw.pred}, false)
	if err != nil || !head {
		t.Fatalf("behind a waiter granted and released: head=%v, %v; want head", head, err)
	}

	if _, err := leaver.enqueue(ctx, nil); err != nil {
		t.Fatal(err)
	}
	jbehind, err := behind.enqueue(ctx, nil)
	if err != nil || jbehind.pred == nil || jbehind.pred.Session != leaver.s.ID() {
		t.Fatalf("behind's join: %+v, %v; want the leaver ahead", jbehind, err)
	}
	leaver.dequeue()
	head, _, err = behind.waitAhead(ctx, []contender{*jbehind.pred}, false)
	if err != nil || head {
		t.Fatalf("behind a waiter that left without a grant: head=%v, %v; want the line read", head, err)
	}
}
