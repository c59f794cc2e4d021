package lockstep

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

// The clock counts from the first sight of each count, and only a count
// that is not 0, or one that changed, is a release.
func TestReleaseClock(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	type look struct {
		count  uint64
		now    int // seconds after t0
		wantAt int
		wantOK bool
	}
	for _, tc := range []struct {
		name  string
		looks []look
	}{
		{"never released", []look{{0, 0, 0, false}, {0, 5, 0, false}}},
		{"a release seen first counts from then", []look{{3, 0, 0, true}, {3, 9, 0, true}}},
		{"a new release restarts the count", []look{{0, 0, 0, false}, {1, 4, 4, true}, {1, 6, 4, true}, {2, 7, 7, true}}},
		{"a count rewritten to 0 is a release", []look{{5, 0, 0, true}, {0, 3, 3, true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c ReleaseClock
			for i, l := range tc.looks {
				got, ok := c.seenAt(l.count, at(l.now))
				if ok != l.wantOK || (ok && !got.Equal(at(l.wantAt))) {
					t.Fatalf("look %d (count %d): at=%v ok=%v, want at=%v ok=%v", i, l.count, got, ok, at(l.wantAt), l.wantOK)
				}
			}
		})
	}
}

// staggerLeft waits out the stagger from the first sight of the latest
// release, and a stagger of 0 never waits.
func TestStaggerLeft(t *testing.T) {
	for _, tc := range []struct {
		name     string
		stagger  time.Duration
		released uint64
		wait     bool
	}{
		{"no stagger", 0, 3, false},
		{"nothing released", time.Hour, 0, false},
		{"a release just seen", time.Hour, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &Semaphore{opts: Options{Releases: &ReleaseClock{}}}
			left := m.staggerLeft(Gate{Stagger: tc.stagger}, &snapshot{holders: holders{Released: tc.released}})
			if (left > 0) != tc.wait {
				t.Fatalf("left %v, want a wait: %v", left, tc.wait)
			}
		})
	}
}

// change is one change of the holders record as a watcher saw it: when
// (the test's monotonic clock), the release count, and the holders.
type change struct {
	at       time.Time
	released uint64
	holders  map[string]bool // by name
}

// watchHolders records every change of the holders (the record, the slot
// keys and the holder keys) at prefix that a blocking query sees, until
// ctx ends.
func watchHolders(ctx context.Context, c *api.Client, prefix string) func() []change {
	var mu sync.Mutex
	var seen []change
	go watchList(ctx, c, HoldersKey(prefix), func(ps api.KVPairs, _ uint64, now time.Time) {
		h := ParseHolders(prefix, ps)
		ch := change{at: now, released: h.Released, holders: map[string]bool{}}
		for _, e := range h.Holding {
			ch.holders[e.Name] = true
		}
		mu.Lock()
		if n := len(seen); n == 0 || seen[n-1].released != ch.released || len(seen[n-1].holders) != len(ch.holders) {
			seen = append(seen, ch)
		}
		mu.Unlock()
	})
	return func() []change {
		mu.Lock()
		defer mu.Unlock()
		return append([]change(nil), seen...)
	}
}

// The head of the line, already waiting when the holder releases, takes
// the slot no sooner than the stagger after it saw the release: the
// wake-up is its sight of it. Measured from Consul's record, as a watch
// saw its changes.
func TestStaggerHeadWaitsAfterRelease(t *testing.T) {
	const stagger = 700 * time.Millisecond
	c, g, ctx := committed(t, "stagger", 1, 30*time.Second)
	g.Stagger = stagger
	changes := watchHolders(ctx, c, testPrefix)
	a, b := newSem(t, c, "a"), newSem(t, c, "b")
	ha, err := a.Acquire(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	got := acquireAsync(t, ctx, b, g)
	waitInLine(t, c, 1, "b in line")
	if err := ha.Release(ctx); err != nil {
		t.Fatal(err)
	}
	hb := <-got
	if hb == nil {
		t.FailNow()
	}
	eventually(t, 5*time.Second, "the watch sees b's grant", func() bool {
		cs := changes()
		return len(cs) > 0 && cs[len(cs)-1].holders["b"]
	})
	var released, granted time.Time
	for _, ch := range changes() {
		switch {
		case ch.released == 1 && released.IsZero():
			released = ch.at
		case ch.holders["b"] && granted.IsZero():
			granted = ch.at
		}
	}
	if released.IsZero() || granted.IsZero() {
		t.Fatalf("the watch saw no release or no grant: %+v", changes())
	}
	if gap := granted.Sub(released); gap < stagger {
		t.Fatalf("b was granted %v after a's release, want at least the stagger %v", gap, stagger)
	}
	_ = hb.Release(ctx)
}

// A lost mark frees a slot, and writes the record with the slot key: a
// head that counted before it is refused its grant, and then waits
// Gate.Stagger from the mark, as after a release.
func TestLostMarkFailsGrantUnderStagger(t *testing.T) {
	c, g, ctx := committed(t, "sha-lost-stagger", 3, time.Minute)
	g.Lease, g.Stagger = time.Minute, time.Hour
	x := newSem(t, c, "x")
	hx, err := x.Acquire(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	judged := hx.slot.rec.Claim
	endSession(t, x.s)
	h := newSem(t, c, "h")
	if _, err := h.enqueue(ctx, nil); err != nil {
		t.Fatal(err)
	}
	snap, err := h.read(ctx, h.opts.Prefix+holdersKey, 0)
	if err != nil {
		t.Fatal(err)
	}
	if wait, _, err := h.headWait(ctx, g, snap); wait != 0 || err != nil {
		t.Fatalf("h, the head with a slot free and nothing released, would wait %v (%v)", wait, err)
	}
	if err := newSem(t, c, "o").MarkLost(ctx, "x", *judged); err != nil {
		t.Fatal(err)
	}
	if hh, err := h.take(ctx, g, snap, nil); !errors.Is(err, errRace) {
		if hh != nil {
			defer func() { _ = hh.Release(ctx) }()
		}
		t.Fatalf("grant on the read before the lost mark = %v, want a race", err)
	}
	snap, err = h.read(ctx, h.opts.Prefix+holdersKey, 0)
	if err != nil {
		t.Fatal(err)
	}
	if wait, _, err := h.headWait(ctx, g, snap); wait == 0 || err != nil {
		t.Fatalf("after the lost mark, under a stagger of 1h, h waits %v (%v)", wait, err)
	}
}
