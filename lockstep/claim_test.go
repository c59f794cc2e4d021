package lockstep

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

// endSession ends s the way a killed process's session ends: Consul drops
// it, which releases (deletes) its holder key, while the holders record
// keeps the claim.
func endSession(t *testing.T, s *Session) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// A holder whose session dies mid-step keeps its node's slot until its
// lease runs out: the next waiter is told it is lost, and only after that
// is reported does the slot pass.
func TestClaimOutlivesItsSession(t *testing.T) {
	c, g, ctx := committed(t, "sha-claim", 1, time.Minute)
	g.Lease = 3 * time.Second
	dead := newSem(t, c, "n1")
	granted := time.Now()
	if _, err := dead.AcquireWith(ctx, g, Writes{Note: "sha-claim"}); err != nil {
		t.Fatal(err)
	}
	endSession(t, dead.s)

	next := newSem(t, c, "n2")
	_, err := next.Acquire(ctx, g)
	var lost *LostError
	if !errors.As(err, &lost) || !errors.Is(err, ErrClaimLost) {
		t.Fatalf("Acquire = %v, want a *LostError", err)
	}
	if waited := time.Since(granted); waited < g.Lease {
		t.Fatalf("the slot passed %s after the grant, before the %s lease ran out", waited, g.Lease)
	}
	if lost.Name != "n1" || lost.Claim.Note != "sha-claim" || lost.Claim.Session != dead.s.ID() {
		t.Fatalf("lost claim = %+v", lost)
	}
	if err := next.MarkLost(ctx, lost.Name, lost.Claim); err != nil {
		t.Fatal(err)
	}
	h, err := next.Acquire(ctx, g)
	if err != nil {
		t.Fatalf("after MarkLost: %v", err)
	}
	hs := readHolders(t, c)
	if got := hs.Counted(); len(got) != 1 || got[0] != "n2" {
		t.Fatalf("counted %v, want [n2]: a lost claim must not count", got)
	}
	if cl, ok := hs.ClaimOf("n1"); !ok || !cl.Lost {
		t.Fatalf("n1's claim = %+v, %v: kept, marked lost, for n1 to find when it returns", cl, ok)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if hs, _ := ReadHolders(c, testPrefix, nil); hs != nil && len(hs.Claims) != 1 {
		t.Fatalf("claims after release = %v, want n1's alone", hs.Claims)
	}
	// n1 comes back: it takes its claim back, but is told it had lapsed,
	// as n2 was granted in its place meanwhile.
	back, err := newSem(t, c, "n1").Reclaim(ctx, g, "sha-claim")
	if err != nil {
		t.Fatal(err)
	}
	if !back.Lapsed() {
		t.Fatal("a claim reclaimed after it was marked lost is not Lapsed")
	}
	_ = back.Release(ctx)
}

// A node's new process reclaims the slot its dead one held, ahead of the
// line, and the line waits until it releases.
func TestReclaimTakesTheNodesSlotBack(t *testing.T) {
	c, g, ctx := committed(t, "sha-reclaim", 1, time.Minute)
	g.Lease = time.Minute
	deadHolder(t, ctx, c, g, "n1")
	waiter := acquireAsync(t, ctx, newSem(t, c, "n2"), g)
	waitInLine(t, c, 1, "n2 in line")

	back := newSem(t, c, "n1")
	if _, err := newSem(t, c, "n3").Reclaim(ctx, g, ""); !errors.Is(err, ErrNoClaim) {
		t.Fatalf("Reclaim with no claim = %v, want ErrNoClaim", err)
	}
	h, err := back.Reclaim(ctx, g, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Fence(ctx); err != nil {
		t.Fatalf("fence of a reclaimed hold: %v", err)
	}
	wantGrantedAfterRelease(t, ctx, waiter, h,
		"n2 was granted while n1's claim was held", "n2 not granted after n1 released its reclaimed slot")
}

// A claim counts until it is reported lost, whatever its times say; an
// orphaned claim of another name is lost only once this contender has
// watched it orphaned, unchanged, for its lease, on its own clock.
func TestClaimBudget(t *testing.T) {
	now := time.Now()
	live := map[string]Entry{"s-live": {Name: "a"}}
	lease := func(since time.Time) Claim {
		return Claim{Session: "s-dead", Since: since, Until: since.Add(time.Minute)}
	}
	cases := []struct {
		name    string
		claims  map[string]Claim
		watched time.Duration // how long ago the contender first saw them; 0: never before
		busy    int
		lost    string
	}{
		{"live holder without a claim", nil, 0, 1, ""},
		{"live claim counts once", map[string]Claim{"a": {Session: "s-live", Until: now.Add(-time.Hour)}}, 0, 1, ""},
		{"dead claim just seen", map[string]Claim{"b": lease(now)}, 0, 2, ""},
		{"dead claim past its Until, just seen: no clock of another host ends it", map[string]Claim{"b": lease(now.Add(-time.Hour))}, 0, 2, ""},
		{"dead claim watched for less than its lease", map[string]Claim{"b": lease(now)}, 59 * time.Second, 2, ""},
		{"dead claim watched for its lease", map[string]Claim{"b": lease(now)}, time.Minute, 2, "b"},
		{"reported lost", map[string]Claim{"b": {Session: "s-dead", Until: now.Add(-time.Second), Lost: true}}, time.Hour, 1, ""},
		{"own orphaned claim is not reported", map[string]Claim{"self": lease(now)}, time.Hour, 2, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			snap := &snapshot{live: live, holders: holders{Claims: tc.claims}}
			busy, orphans := snap.budget("self")
			if len(busy) != tc.busy {
				t.Errorf("busy = %v, want %d", busy, tc.busy)
			}
			clock := now
			m := &Semaphore{now: func() time.Time { return clock }, orphans: map[string]orphanSeen{}}
			if tc.watched > 0 {
				clock = now.Add(-tc.watched)
				m.judge(orphans)
				clock = now
			}
			lost, _ := m.judge(orphans)
			got := ""
			if lost != nil {
				got = lost.Name
			}
			if got != tc.lost {
				t.Errorf("lost = %q, want %q", got, tc.lost)
			}
		})
	}
}

// A claim written again while it is watched (reclaimed by its node's new
// session, say) is watched anew: the time it was orphaned before counts
// for nothing.
func TestClaimWatchStartsAgainOnAWrite(t *testing.T) {
	now := time.Now()
	clock := now
	m := &Semaphore{now: func() time.Time { return clock }, orphans: map[string]orphanSeen{}}
	first := Claim{Session: "s1", Since: now, Until: now.Add(time.Minute)}
	m.judge(map[string]Claim{"b": first})
	clock = now.Add(50 * time.Second)
	again := Claim{Session: "s2", Since: clock, Until: clock.Add(time.Minute)}
	m.judge(map[string]Claim{"b": again})
	clock = now.Add(70 * time.Second)
	if lost, wake := m.judge(map[string]Claim{"b": again}); lost != nil || wake != 40*time.Second {
		t.Fatalf("lost %v, wake %s: want none, and 40s left of the new claim's watch", lost, wake)
	}
}

// A node that is down claims its slot whatever the count, and the line
// waits for it; a closed gate claims nothing.
func TestClaimDown(t *testing.T) {
	c, g, ctx := committed(t, "sha-down", 1, time.Minute)
	g.Lease = time.Minute
	holder := newSem(t, c, "n1")
	h1, err := holder.Acquire(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	down := newSem(t, c, "n2")
	if err := down.ClaimDown(ctx, g, "sha-down"); err != nil {
		t.Fatal(err)
	}
	waiter := acquireAsync(t, ctx, newSem(t, c, "n3"), g)
	if err := h1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	h2, err := down.Reclaim(ctx, g, "")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-waiter:
		t.Fatal("n3 granted beside n2, which is down")
	case <-time.After(time.Second):
	}
	if err := h2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if h3 := <-waiter; h3 != nil {
		_ = h3.Release(ctx)
	}
	cancelGate(t, c, g)
	if err := newSem(t, c, "n4").ClaimDown(ctx, g, "sha-down"); !errors.Is(err, ErrCancelled) {
		t.Fatalf("ClaimDown under a CANCEL = %v, want ErrCancelled", err)
	}
}

// A name that is down outside the line counts against K at the head of the
// line, which counts again as it comes back.
func TestUnavailableCountsAgainstK(t *testing.T) {
	c, g, ctx := committed(t, "sha-unavail", 1, time.Minute)
	var mu sync.Mutex
	down := []string{"n9", "n1"} // n1 is the contender itself: never counted
	m, err := New(c, newSession(t, c), Options{Prefix: testPrefix, Name: "n1",
		Unavailable: func(context.Context) ([]string, error) {
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(down), nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	got := acquireAsync(t, ctx, m, g)
	select {
	case <-got:
		t.Fatal("granted while n9 was down at K=1")
	case <-time.After(2 * time.Second):
	}
	mu.Lock()
	down = nil
	mu.Unlock()
	select {
	case h := <-got:
		if h == nil {
			t.FailNow()
		}
		_ = h.Release(ctx)
	case <-time.After(10 * time.Second):
		t.Fatal("not granted once n9 was back")
	}
}

// MarkLost marks the claim that was judged lost, not a newer one of the
// same name and session: a node's process that down-claimed, reclaimed,
// released and down-claimed again keeps its new claim counting.
func TestMarkLostSparesANewerClaimOfTheSameSession(t *testing.T) {
	c, g, ctx := committed(t, "sha-marklost-newer", 2, time.Minute)
	g.Lease = time.Minute
	x := newSem(t, c, "x")
	if err := x.ClaimDown(ctx, g, "first"); err != nil {
		t.Fatal(err)
	}
	hs := readHolders(t, c)
	judged, ok := hs.ClaimOf("x")
	if !ok {
		t.Fatal("no claim after ClaimDown")
	}
	h, err := x.Reclaim(ctx, g, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	later := judged.Since.Add(time.Second)
	x.now = func() time.Time { return later }
	if err := x.ClaimDown(ctx, g, "second"); err != nil {
		t.Fatal(err)
	}
	if err := newSem(t, c, "o").MarkLost(ctx, "x", judged); err != nil {
		t.Fatal(err)
	}
	hs = readHolders(t, c)
	if cl, _ := hs.ClaimOf("x"); cl.Lost || cl.Note != "second" {
		t.Fatalf("x's claim after a mark of its earlier one: %+v, want the second, counting", cl)
	}
}

// MarkLostWith writes the caller's report of the loss in the mark's
// transaction: with the mark, or not at all. A reclaim between the
// judgement and the write leaves nothing marked and nothing reported, and
// a caller's op that a write in between made fail is made again from a
// new read.
func TestMarkLostWithWritesTheReportWithTheMark(t *testing.T) {
	const report = "lostreport/x"
	for _, tt := range []struct {
		name    string
		reclaim bool
		stale   int // tries whose report op is a CAS at an index gone by
		marked  bool
	}{
		{"not back", false, 0, true},
		{"reclaimed between the judgement and the write", true, 0, false},
		{"the report's op fails once", false, 1, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, g, ctx := committed(t, "sha-marklostwith", 1, time.Minute)
			g.Lease = time.Minute
			x := newSem(t, c, "x")
			if err := x.ClaimDown(ctx, g, "step"); err != nil {
				t.Fatal(err)
			}
			hs := readHolders(t, c)
			judged, _ := hs.ClaimOf("x")
			tries := 0
			with := func(context.Context) (api.TxnOps, error) {
				tries++
				if tt.reclaim && tries == 1 {
					if _, err := x.Reclaim(ctx, g, "back"); err != nil {
						t.Fatal(err)
					}
				}
				index := uint64(0)
				if tries <= tt.stale {
					index = 1 << 40
				}
				return api.TxnOps{{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: report, Value: []byte("x lost"), Index: index}}}, nil
			}
			marked, err := newSem(t, c, "o").MarkLostWith(ctx, "x", judged, with)
			if err != nil {
				t.Fatal(err)
			}
			p, _, err := c.KV().Get(report, nil)
			if err != nil {
				t.Fatal(err)
			}
			hs = readHolders(t, c)
			cl, _ := hs.ClaimOf("x")
			if marked != tt.marked || (p != nil) != tt.marked || cl.Lost != tt.marked {
				t.Fatalf("marked %v, report written %v, claim %+v after %d tries; want all %v", marked, p != nil, cl, tries, tt.marked)
			}
			if want := tt.stale + 1; tries != want && !tt.reclaim {
				t.Fatalf("%d tries, want %d", tries, want)
			}
		})
	}
}
