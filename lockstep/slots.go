package lockstep

import (
	"encoding/json"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"
)

// slotsName is the folder of slot keys under the holders record's folder,
// which is why it is no Name: a name's holder keys are filed beside it.
const (
	slotsName   = ".slots"
	slotsPrefix = holderPrefix + slotsName + "/"
	// maxSlot bounds a slot's number, so that a key written by hand with a
	// huge one cannot make a grant pick a number no one reads.
	maxSlot = 1 << 16
)

// SlotKey is slot n's key under prefix (see doc.go, "Slot keys").
func SlotKey(prefix string, n int) string {
	return normPrefix(prefix) + slotsPrefix + strconv.Itoa(n)
}

// SlotsPrefix is the folder of the slot keys under prefix, for tools and
// readers that read them apart from the holder keys.
func SlotsPrefix(prefix string) string { return normPrefix(prefix) + slotsPrefix }

// slotNumber parses rest, the part of a slot key after its folder.
func slotNumber(rest string) (int, bool) {
	if rest == "" || (len(rest) > 1 && rest[0] == '0') {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	return n, err == nil && n >= 0 && n < maxSlot && strconv.Itoa(n) == rest
}

// slotRec is the value of one slot key: who took it, with its claim, and
// how many times it was freed.
type slotRec struct {
	// Name and Session took the slot; "" when it is free.
	Name    string `json:"name,omitempty"`
	Session string `json:"session,omitempty"`
	Domain  string `json:"domain,omitempty"`
	// Claim is the name's claim (Gate.Lease), nil for a slot that ends
	// with its session.
	Claim *Claim `json:"claim,omitempty"`
	// Released counts this slot's releases and lost marks.
	Released uint64 `json:"released,omitempty"`
	// Freed names the grant whose release freed the slot last: its
	// copy in the record (see "Slot keys: older versions") no longer
	// counts, and the next writer of the record prunes it.
	Freed *grantID `json:"freed,omitempty"`
}

// grantID names one grant, ClaimDown or reclaim of a claim by the
// session that wrote it and the claim's Since: fields that every
// version's claim carries, so that an older version, which rewrites the
// record's claims in its own shape, keeps them.
type grantID struct {
	Session string    `json:"session"`
	Since   time.Time `json:"since"`
}

func (c Claim) id() grantID { return grantID{Session: c.Session, Since: c.Since} }

// sameGrant says c and o were written by one grant (or reclaim): one is
// the other's copy, the slot key's or the record's.
func (c Claim) sameGrant(o Claim) bool { return c.Session == o.Session && c.Since.Equal(o.Since) }

// freedBy says a slot key names c's grant as released.
func (s *snapshot) freedBy(c Claim) bool {
	for _, r := range s.slots {
		if f := r.rec.Freed; f != nil && f.Session == c.Session && f.Since.Equal(c.Since) {
			return true
		}
	}
	return false
}

// slotRef is one slot key as read.
type slotRef struct {
	n     int
	index uint64 // ModifyIndex; 0 for a slot no one made yet
	rec   slotRec
}

// parseSlot reads one slot key into s. A value that is not JSON frees the
// slot: it is rewritten at its index by the next grant, as the record is.
func (s *snapshot) parseSlot(p *api.KVPair, rest string) {
	n, ok := slotNumber(rest)
	if !ok {
		return
	}
	ref := slotRef{n: n, index: p.ModifyIndex}
	if err := json.Unmarshal(p.Value, &ref.rec); err != nil {
		s.bad = fmt.Errorf("lockstep: %s is not a slot record (the next grant of it rewrites it): %w", p.Key, err)
		ref.rec = slotRec{}
	}
	s.slots = append(s.slots, ref)
}

// mergeSlots makes the view the rest of the package reads: the claims of
// the record and of the slot keys by name, each name once, and the count
// of slots freed in all. The record keeps a copy of each claim of this
// version, for older versions to count (doc.go, "Slot keys: older
// versions"): a copy whose grant a slot key says was released counts no
// more, and where the slot key holds the same grant, the slot key is the
// claim, lost if either copy says so (a head of either version marked
// it). Where the record holds another grant of the name (an older
// version's, written later), the record's stands while it counts, and
// the slot key's only once it does not: the name counts if either does.
func (s *snapshot) mergeSlots() {
	s.record = s.holders
	claims := make(map[string]Claim, len(s.record.Claims)+len(s.slots))
	for name, c := range s.record.Claims {
		if !s.freedBy(c) {
			claims[name] = c
		}
	}
	released := s.record.Released
	for _, r := range s.slots {
		released += r.rec.Released
		c := r.rec.Claim
		if c == nil || r.rec.Name == "" {
			continue
		}
		merged := *c
		if old, ok := claims[r.rec.Name]; ok {
			switch {
			case old.sameGrant(merged):
				merged.Lost = merged.Lost || old.Lost
			case old.counts():
				// Another grant of the name: an older version's,
				// written after ours (it reclaimed from our copy).
				// Its holder may be live; ours is not.
				continue
			}
		}
		claims[r.rec.Name] = merged
	}
	if len(claims) == 0 {
		claims = nil
	}
	s.holders.Claims = claims
	s.holders.Released = released
}

// taken says slot r holds a name: a claim (counting or lost), or a
// holder without a claim whose session still locks its holder key.
func (s *snapshot) taken(r slotRef) bool {
	if r.rec.Name == "" {
		return false
	}
	_, live := s.live[r.rec.Session]
	return r.rec.Claim != nil || live
}

// slotOf returns the slot that names name, if any.
func (s *snapshot) slotOf(name string) (slotRef, bool) {
	for _, r := range s.slots {
		if r.rec.Name == name {
			return r, true
		}
	}
	return slotRef{}, false
}

// pick is the slot a grant, down-claim or reclaim for name writes: the
// one that names it, else the lowest free one, else the lowest number no
// key has (index 0: created by the CAS). A number past maxSlot would be
// one no reader counts (slotNumber), so with every number below it taken
// nothing is picked: the grant is refused, never left uncounted.
func (s *snapshot) pick(name string) (slotRef, error) {
	if r, ok := s.slotOf(name); ok {
		return r, nil
	}
	used := map[int]bool{}
	for _, n := range s.unreadSlots {
		used[n] = true // it may hold a claim: never written over unread
	}
	free, found := slotRef{}, false
	for _, r := range s.slots { // in no order: the lowest free one
		switch {
		case s.taken(r):
			used[r.n] = true
		case !found || r.n < free.n:
			free, found = r, true
		}
	}
	if found {
		return free, nil
	}
	n := 0
	for used[n] {
		n++
	}
	if n >= maxSlot {
		return slotRef{}, fmt.Errorf("%w: %d keys under %s name a holder (a token that may write there wrote them?); remove the ones no node holds", ErrNoSlotNumber, len(used), slotsPrefix)
	}
	return slotRef{n: n}, nil
}

// casSlot is the op that writes rec into slot r at the index it was read.
func casSlot(prefix string, r slotRef, rec slotRec) *api.TxnOp {
	b, _ := json.Marshal(rec)
	return &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: SlotKey(prefix, r.n), Value: b, Index: r.index}}
}

// casRecord is the op that writes rec as the holders record at index,
// moving its seq so that the write is never one Consul skips.
func casRecord(prefix string, rec holders, index uint64) *api.TxnOp {
	rec.Seq++
	b, _ := json.Marshal(rec)
	return &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: prefix + holdersKey, Value: b, Index: index}}
}

// baseRecord is the record to be written again by a writer of it: its
// holders that still hold (the others are stale), its claims but name's,
// which the writer sets or ends, and its count. A claim of the record
// stays as it is unless a slot key holds the same grant, whose view
// (mergeSlots) brings a lost mark over; a copy of a released grant is
// pruned; and a slot key's claim of a name the record lacks is added.
// So an older version's grant of a name is never replaced by a slot
// key's older grant of it (doc.go, "Slot keys: older versions").
func (s *snapshot) baseRecord(name string) holders {
	rec := holders{Holders: map[string]Entry{}, Last: s.record.Last, Claims: map[string]Claim{},
		Released: s.record.Released, Seq: s.record.Seq}
	for id, e := range s.record.Holders {
		if _, ok := s.live[id]; ok && e.Name != name {
			rec.Holders[id] = e
		}
	}
	for n, c := range s.record.Claims {
		if n == name || s.freedBy(c) {
			continue
		}
		if v, ok := s.holders.Claims[n]; ok && v.sameGrant(c) {
			c = v
		}
		rec.Claims[n] = c
	}
	for n, c := range s.holders.Claims {
		if _, ok := rec.Claims[n]; !ok && n != name {
			rec.Claims[n] = c
		}
	}
	if len(rec.Claims) == 0 {
		rec.Claims = nil
	}
	return rec
}

// markOps are the CASes that copy into slot keys the lost marks that
// only the record's copy of their grant has (an older head wrote them),
// for a writer of the record to put in its transaction; the slot of
// skip, which the writer writes itself, aside. The record's released
// counted the mark already. Without them, an older process of the name
// that takes the record's claim and releases it would leave the slot
// key's grant counting again.
func (s *snapshot) markOps(prefix, skip string) api.TxnOps {
	var ops api.TxnOps
	for _, r := range s.slots {
		c := r.rec.Claim
		if c == nil || c.Lost || r.rec.Name == "" || r.rec.Name == skip {
			continue
		}
		if rc, ok := s.record.Claims[r.rec.Name]; ok && rc.Lost && rc.sameGrant(*c) {
			sr, lc := r.rec, *c
			lc.Lost = true
			sr.Claim = &lc
			ops = append(ops, casSlot(prefix, r, sr))
		}
	}
	return ops
}

// withClaim is rec with c as name's claim (nil: none), for the record a
// grant, ClaimDown or reclaim of name writes.
func withClaim(rec holders, name string, c *Claim) holders {
	if c != nil {
		rec.Claims = maps.Clone(rec.Claims)
		if rec.Claims == nil {
			rec.Claims = map[string]Claim{}
		}
		rec.Claims[name] = *c
	}
	return rec
}

// isSlotKey says rel, relative to the prefix, is a slot key.
func isSlotKey(rel string) bool {
	rest, ok := strings.CutPrefix(rel, slotsPrefix)
	if !ok {
		return false
	}
	_, ok = slotNumber(rest)
	return ok
}

// slotResult finds, in a transaction's results, the index at which slot
// n was written.
func slotResult(prefix string, resp *api.TxnResponse, n int) uint64 {
	key := SlotKey(prefix, n)
	for _, r := range resp.Results {
		if r.KV != nil && r.KV.Key == key {
			return r.KV.ModifyIndex
		}
	}
	return 0
}

// txnCount counts the grant and release transactions this process sent,
// for the benchmark that shows they do not race (bench_test.go).
var txnCount struct{ grants, releases atomic.Int64 }
