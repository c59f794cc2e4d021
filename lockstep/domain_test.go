package lockstep

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"
	"github.com/rollagent/rollagent/internal/testkit"
)

// domainSem is a contender of domain whose debug log the test reads.
func domainSem(t *testing.T, c *api.Client, name, domain string, opts Options) (*Semaphore, *testkit.Buffer) {
	t.Helper()
	var log testkit.Buffer
	opts.Prefix, opts.Name, opts.Domain = testPrefix, name, domain
	opts.Logger = hclog.New(&hclog.LoggerOptions{Output: &log, Level: hclog.Debug})
	m, err := New(c, newSession(t, c), opts)
	if err != nil {
		t.Fatal(err)
	}
	return m, &log
}

// holdingDomains reads, from Consul, the names that use a slot by the
// holders record and the holder keys, and the domain the record gives each.
func holdingDomains(t *testing.T, c *api.Client) map[string]string {
	t.Helper()
	h := readHolders(t, c)
	out := map[string]string{}
	for _, e := range h.Holding {
		out[e.Name] = e.Domain
	}
	for n, cl := range h.Claims {
		if !cl.Lost {
			out[n] = cl.Domain
		}
	}
	return out
}

// perDomain fails when any domain has more than limit names in d.
func perDomain(d map[string]string, limit int) error {
	count := map[string][]string{}
	for n, dom := range d {
		if dom != "" {
			count[dom] = append(count[dom], n)
		}
	}
	for dom, ns := range count {
		if len(ns) > limit {
			slices.Sort(ns)
			return fmt.Errorf("domain %s has %d using a slot, max %d: %v", dom, len(ns), limit, ns)
		}
	}
	return nil
}

// The head of the line does not take a free slot into a full domain: it
// waits, and everyone behind it, until the domain's holder releases; a
// node with no domain is one of its own.
func TestPerDomainHoldsTheHeadOutOfAFullDomain(t *testing.T) {
	c, g, ctx := committed(t, "sha-domain", 3, time.Minute)
	g.PerDomain, g.Lease = 1, time.Minute
	a1, _ := domainSem(t, c, "a1", "zone=a", Options{})
	h1, err := a1.Acquire(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	// Two without a domain share none: both are granted beside a1.
	for _, n := range []string{"x1", "x2"} {
		m, _ := domainSem(t, c, n, "", Options{})
		h, err := m.Acquire(ctx, g)
		if err != nil {
			t.Fatalf("%s, of no domain: %v", n, err)
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	a2, log := domainSem(t, c, "a2", "zone=a", Options{})
	got := acquireAsync(t, ctx, a2, g)
	eventually(t, 10*time.Second, "a2 waits for zone=a", func() bool {
		return strings.Contains(log.String(), "waiting: our domain is full")
	})
	b1, _ := domainSem(t, c, "b1", "zone=b", Options{})
	gotB := acquireAsync(t, ctx, b1, g)
	waitInLine(t, c, 2, "a2 and b1 in line")
	testkit.Steady(t, 500*time.Millisecond, 50*time.Millisecond, func() error {
		if d := holdingDomains(t, c); len(d) != 1 {
			return fmt.Errorf("slots used %v while a2 waits for zone=a: want a1's alone", d)
		}
		return nil
	})
	if err := h1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	h2, hb := <-got, <-gotB
	if h2 == nil || hb == nil {
		t.FailNow()
	}
	d := holdingDomains(t, c)
	if err := perDomain(d, 1); err != nil || len(d) != 2 {
		t.Fatalf("after a1's release: %v (%v), want a2 and b1", d, err)
	}
	_ = h2.Release(ctx)
	_ = hb.Release(ctx)
}

// A holder that dies keeps its claim, and the claim its domain: the next
// of that domain is not granted beside it, though K has room, until the
// claim is reported lost; one of another domain is.
func TestPerDomainCountsADeadHoldersClaim(t *testing.T) {
	c, g, ctx := committed(t, "sha-domain-dead", 3, time.Minute)
	g.PerDomain, g.Lease = 1, 2*time.Second
	dead, _ := domainSem(t, c, "a1", "zone=a", Options{})
	if _, err := dead.Acquire(ctx, g); err != nil {
		t.Fatal(err)
	}
	endSession(t, dead.s)
	if d := holdingDomains(t, c); d["a1"] != "zone=a" {
		t.Fatalf("a1's claim after its session ended: %v, want it kept in zone=a", d)
	}
	b1, _ := domainSem(t, c, "b1", "zone=b", Options{})
	hb, err := b1.Acquire(ctx, g)
	if err != nil {
		t.Fatalf("b1, of another domain: %v", err)
	}
	a2, _ := domainSem(t, c, "a2", "zone=a", Options{})
	_, err = a2.Acquire(ctx, g)
	var lost *LostError
	if !errors.As(err, &lost) || lost.Name != "a1" {
		t.Fatalf("a2's Acquire = %v, want a1's claim reported lost first", err)
	}
	if d := holdingDomains(t, c); len(d) != 2 || d["a2"] != "" {
		t.Fatalf("while a1's claim counted: %v, want a1 and b1 alone", d)
	}
	if err := a2.MarkLost(ctx, lost.Name, lost.Claim); err != nil {
		t.Fatal(err)
	}
	h2, err := a2.Acquire(ctx, g)
	if err != nil {
		t.Fatalf("after a1's claim was marked lost: %v", err)
	}
	_ = h2.Release(ctx)
	_ = hb.Release(ctx)
}

// A node down outside the line counts in the domain Options.Domains gives
// it: the head of that domain waits until it is back.
func TestPerDomainCountsNodesDownOutsideTheLine(t *testing.T) {
	c, g, ctx := committed(t, "sha-domain-down", 3, time.Minute)
	g.PerDomain = 1
	var down atomic.Bool
	down.Store(true)
	opts := Options{
		Unavailable: func(context.Context) ([]string, error) {
			if down.Load() {
				return []string{"a9", "b9"}, nil
			}
			return nil, nil
		},
		Domains: func(context.Context) (map[string]string, error) {
			return map[string]string{"a9": "zone=a", "b9": "zone=b"}, nil
		},
	}
	c1, _ := domainSem(t, c, "c1", "zone=c", opts)
	hc, err := c1.Acquire(ctx, g)
	if err != nil {
		t.Fatalf("c1, of a domain with none down: %v", err)
	}
	_ = hc.Release(ctx)
	a1, log := domainSem(t, c, "a1", "zone=a", opts)
	got := acquireAsync(t, ctx, a1, g)
	eventually(t, 10*time.Second, "a1 waits for zone=a", func() bool {
		return strings.Contains(log.String(), "waiting: nodes of our domain are down")
	})
	if d := holdingDomains(t, c); len(d) != 0 {
		t.Fatalf("slots used %v while a9 of zone=a is down", d)
	}
	down.Store(false)
	h := <-got
	if h == nil {
		t.FailNow()
	}
	_ = h.Release(ctx)
}

// A reclaim that moves a counting claim to another domain writes the
// record (doc.go, "Slot keys"): a head that counted that domain before it
// is refused its grant and counts again, so the domain never holds two.
func TestReclaimIntoAnotherDomainFailsStaleGrant(t *testing.T) {
	c, g, ctx := committed(t, "sha-reclaim-domain", 3, time.Minute)
	g.PerDomain, g.Lease = 1, time.Minute
	x, _ := domainSem(t, c, "x", "zone=a", Options{})
	if _, err := x.Acquire(ctx, g); err != nil {
		t.Fatal(err)
	}
	endSession(t, x.s)
	h, _ := domainSem(t, c, "h", "zone=b", Options{})
	if _, err := h.enqueue(ctx, nil); err != nil {
		t.Fatal(err)
	}
	snap, err := h.read(ctx, h.opts.Prefix+holdersKey, 0)
	if err != nil {
		t.Fatal(err)
	}
	if wait, _, err := h.headWait(ctx, g, snap); wait != 0 || err != nil {
		t.Fatalf("h, the head of zone=b with x in zone=a, would wait %v (%v)", wait, err)
	}
	// x's next process, its host now in zone=b, reclaims.
	x2, _ := domainSem(t, c, "x", "zone=b", Options{})
	hx, err := x2.Reclaim(ctx, g, "")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hx.Release(ctx) }()
	hh, err := h.take(ctx, g, snap, nil)
	if !errors.Is(err, errRace) {
		if hh != nil {
			defer func() { _ = hh.Release(ctx) }()
		}
		d := holdingDomains(t, c)
		t.Fatalf("grant on the read before the reclaim = %v, want a race; domains now %v (%v)", err, d, perDomain(d, 1))
	}
}
