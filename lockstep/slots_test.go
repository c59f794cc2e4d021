package lockstep

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

// slotsOf reads the slot keys at testPrefix by number.
func slotsOf(t *testing.T, c *api.Client) map[int]*api.KVPair {
	t.Helper()
	ps, _, err := c.KV().List(SlotsPrefix(testPrefix), nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]*api.KVPair{}
	for _, p := range ps {
		if n, ok := slotNumber(p.Key[len(SlotsPrefix(testPrefix)):]); ok {
			out[n] = p
		}
	}
	return out
}

// A release writes its own slot key and no key another holder writes:
// the holders record stays as the last grant left it, and the slot's
// count of releases moves all the same. Two holders at K = 2 keep their
// claims in two slot keys.
func TestReleaseTouchesItsOwnSlotAlone(t *testing.T) {
	c, g, ctx := committed(t, "sha-slots", 2, time.Minute)
	g.Lease = time.Minute
	a, b := newSem(t, c, "a"), newSem(t, c, "b")
	ha, err := a.Acquire(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	hb, err := b.Acquire(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	if got := slotsOf(t, c); len(got) != 2 {
		t.Fatalf("two holders in %d slot keys: %v", len(got), got)
	}
	rec, _, err := c.KV().Get(HoldersKey(testPrefix), nil)
	if err != nil || rec == nil {
		t.Fatalf("holders record: %v", err)
	}
	other := slotsOf(t, c)[hb.slot.n]
	if err := ha.Release(ctx); err != nil {
		t.Fatal(err)
	}
	after, _, err := c.KV().Get(HoldersKey(testPrefix), nil)
	if err != nil || after == nil || after.ModifyIndex != rec.ModifyIndex {
		t.Fatalf("the release wrote the holders record: %d, was %d (%v)", after.ModifyIndex, rec.ModifyIndex, err)
	}
	if p := slotsOf(t, c)[hb.slot.n]; p.ModifyIndex != other.ModifyIndex {
		t.Fatalf("a's release wrote b's slot key %s", p.Key)
	}
	h, err := ReadHolders(c, testPrefix, nil)
	if err != nil || h.Released != 1 || len(h.Counted()) != 1 {
		t.Fatalf("after a's release: released %d, counted %v (%v)", h.Released, h.Counted(), err)
	}
	if err := hb.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A claim an older version kept in the holders record counts, and its
// node's reclaim moves it into a slot key, leaving in the record a copy
// of the renewed claim for older versions; its release then frees the
// slot for the next.
func TestRecordClaimMovesIntoASlot(t *testing.T) {
	c, g, ctx := committed(t, "sha-legacy", 1, time.Minute)
	g.Lease = time.Minute
	now := time.Now().UTC()
	old := holders{Holders: map[string]Entry{}, Released: 4, Claims: map[string]Claim{
		"n1": {Session: "0b7d6d2e-0000-4000-8000-00000000dead", Since: now, Until: now.Add(time.Hour)}}}
	b, _ := json.Marshal(old)
	if _, err := c.KV().Put(&api.KVPair{Key: HoldersKey(testPrefix), Value: b}, nil); err != nil {
		t.Fatal(err)
	}
	waiter := acquireAsync(t, ctx, newSem(t, c, "n2"), g)
	waitInLine(t, c, 1, "n2 in line")
	h, err := newSem(t, c, "n1").Reclaim(ctx, g, "")
	if err != nil {
		t.Fatal(err)
	}
	hs, err := ReadHolders(c, testPrefix, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, _, _ := c.KV().Get(HoldersKey(testPrefix), nil)
	var rec holders
	if p == nil || json.Unmarshal(p.Value, &rec) != nil || len(rec.Claims) != 1 || rec.Claims["n1"].Session != h.m.s.ID() || len(slotsOf(t, c)) != 1 {
		t.Fatalf("the record does not copy the reclaimed claim alone: %s, slots %v", p.Value, slotsOf(t, c))
	}
	if c, ok := hs.ClaimOf("n1"); !ok || c.Session != h.m.s.ID() || hs.Released != 4 {
		t.Fatalf("n1's claim after the reclaim: %+v (released %d)", c, hs.Released)
	}
	wantGrantedAfterRelease(t, ctx, waiter, h,
		"n2 was granted while n1's reclaimed claim counted", "n2 not granted after n1 released")
	if hs, err := ReadHolders(c, testPrefix, nil); err != nil || hs.Released != 6 || len(hs.Claims) != 0 {
		t.Fatalf("after both released: released %d, claims %v (%v)", hs.Released, hs.Claims, err)
	}
}

// With every slot number a reader counts taken (by keys a token that may
// write .slots/ wrote, naming claims marked lost, which count for no one),
// a grant is refused with ErrNoSlotNumber: the next number would be one
// no reader counts, and a claim kept there would count for no one.
func TestGrantRefusedPastTheLastSlotNumber(t *testing.T) {
	c, g, ctx := committed(t, "sha-slot-numbers", 1, 2*time.Minute)
	g.Lease = time.Minute
	b, _ := json.Marshal(slotRec{Name: "flood", Claim: &Claim{Session: "gone", Lost: true}})
	for first := 0; first < maxSlot; first += 64 {
		var ops api.TxnOps
		for n := first; n < first+64; n++ {
			ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: SlotKey(testPrefix, n), Value: b}})
		}
		if ok, _, _, err := c.Txn().Txn(ops, nil); err != nil || !ok {
			t.Fatalf("write slot keys from %d: ok=%v %v", first, ok, err)
		}
	}
	h, err := newSem(t, c, "x").Acquire(ctx, g)
	if h != nil {
		defer func() { _ = h.Release(ctx) }()
		hs, _ := ReadHolders(c, testPrefix, nil)
		t.Fatalf("granted with every slot number taken; counted now: %v", hs.Counted())
	}
	if !errors.Is(err, ErrNoSlotNumber) {
		t.Fatalf("Acquire = %v, want ErrNoSlotNumber", err)
	}
	if p, _, err := c.KV().Get(SlotKey(testPrefix, maxSlot), nil); err != nil || p != nil {
		t.Fatalf("slot %d, which no reader counts: %v (%v)", maxSlot, p, err)
	}
	t.Log(err)
}

// A grant takes the lowest free slot number, not the first free key in
// the listing's text order, where .slots/10 sorts before .slots/2.
func TestGrantTakesTheLowestFreeNumber(t *testing.T) {
	c, g, ctx := committed(t, "sha-slot-lowest", 1, time.Minute)
	g.Lease = time.Minute
	for _, n := range []int{10, 2} {
		if _, err := c.KV().Put(&api.KVPair{Key: SlotKey(testPrefix, n), Value: []byte(`{"released":1}`)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := newSem(t, c, "n1").Acquire(ctx, g); err != nil {
		t.Fatal(err)
	}
	var rec slotRec
	if p := slotsOf(t, c)[2]; p == nil || json.Unmarshal(p.Value, &rec) != nil || rec.Name != "n1" {
		t.Errorf("n1's grant did not take slot 2, the lowest free: %+v", slotsOf(t, c))
	}
}
