package lockstep

import (
	"net/http"
	"testing"
	"time"

	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/testkit"
)

// nonBlocking counts the reads of path that are not blocking queries.
func nonBlocking(log *testkit.Counter, path string) int {
	return log.Count(func(r testkit.Request) bool { return r.Method == http.MethodGet && r.Path == path && !r.Blocking })
}

// A hold released before watchAfter never watches its holder key: in a
// fleet of quick replacements that is a request per turn.
func TestShortHoldSendsNoWatch(t *testing.T) {
	srv := consultest.NewDev(t)
	c, log := testkit.CountedClient(srv)
	g := commit(t, c, "short", 1)
	ctx := ctxFor(t, 30*time.Second)
	m := newSem(t, c, "quick")
	for i := range 3 {
		h, err := m.Acquire(ctx, g)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if n := log.To(http.MethodGet, "/v1/kv/"+m.hkey); n != 0 {
			t.Fatalf("round %d: %d reads of the holder key, want none", i, n)
		}
	}
}

// Lost still closes when the holder key goes, whether it went before the
// watch began or after, and once the watch runs it reads the key.
func TestLostSeesTheHolderKeyGo(t *testing.T) {
	for _, tt := range []struct {
		name     string
		watching bool // the key goes once the watch has begun
	}{
		{"before the watch begins", false},
		{"while it watches", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := consultest.NewDev(t)
			c, log := testkit.CountedClient(srv)
			g := commit(t, c, "lost", 1)
			ctx := ctxFor(t, 30*time.Second)
			m := newSem(t, c, "holder")
			h, err := m.Acquire(ctx, g)
			if err != nil {
				t.Fatal(err)
			}
			if tt.watching {
				eventually(t, watchAfter+10*time.Second, "the hold's watch", func() bool {
					return log.To(http.MethodGet, "/v1/kv/"+m.hkey) > 0
				})
			} else if n := log.To(http.MethodGet, "/v1/kv/"+m.hkey); n != 0 {
				t.Fatalf("the hold watched its key %d times at once, want none before %s", n, watchAfter)
			}
			if _, err := srv.Client().KV().Delete(m.hkey, nil); err != nil {
				t.Fatal(err)
			}
			select {
			case <-h.Lost():
			case <-time.After(watchAfter + 10*time.Second):
				t.Fatal("Lost did not close after the holder key was deleted")
			}
		})
	}
}

// At K = 1, a waiter that comes to head the line because the one ahead was
// granted blocks on the holders from that grant at once: a read then would
// only show the slot taken. It still takes the slot when it is released.
func TestHeadBlocksFromTheGrantAhead(t *testing.T) {
	srv := consultest.NewDev(t)
	c := srv.Client()
	g := commit(t, c, "head", 1)
	ctx := ctxFor(t, 30*time.Second)
	first, err := newSem(t, c, "first").Acquire(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	second := newSem(t, c, "second")
	lc, log := testkit.CountedClient(srv)
	third, err := New(lc, newSession(t, lc), Options{Prefix: testPrefix, Name: "third"})
	if err != nil {
		t.Fatal(err)
	}
	got2 := acquireAsync(t, ctx, second, g)
	waitInLine(t, c, 1, "the second in line")
	got3 := acquireAsync(t, ctx, third, g)
	waitInLine(t, c, 2, "the third in line")
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	h2 := <-got2
	if h2 == nil {
		t.FailNow()
	}
	holders := "/v1/kv/" + testPrefix + "/.holders"
	eventually(t, 10*time.Second, "the third's wait on the holders", func() bool {
		return log.To(http.MethodGet, holders) > 0
	})
	if n := nonBlocking(log, holders); n != 0 {
		t.Fatalf("the new head read the holders %d times without blocking, want none", n)
	}
	if err := h2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	h3 := <-got3
	if h3 == nil {
		t.FailNow()
	}
	if err := h3.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
