package lockstep

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

// Waiters get the slot in the order they joined the line, whoever holds it
// when they join, and a waiter that leaves the line (its Acquire ends) does
// not hold up the ones behind it.
func TestGrantsInLineOrder(t *testing.T) {
	c := devClient(t)
	g := commit(t, c, "fifo", 1)
	ctx := ctxFor(t, time.Minute)
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
	if err := p.enqueue(ctx, nil); err != nil {
		t.Fatal(err)
	}
	snap, err := p.read(ctx, p.opts.Prefix, 0)
	if err != nil {
		t.Fatal(err)
	}
	ahead := slices.Clone(snap.contenders)
	p.dequeue()
	if err := p.enqueue(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := w.enqueue(ctx, nil); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	head, _, err := w.waitAhead(wctx, ahead)
	if err != nil {
		t.Fatalf("waited for a predecessor that had come back behind: %v", err)
	}
	if !head {
		t.Fatal("no one else was ahead, yet the waiter does not head the line")
	}
}
