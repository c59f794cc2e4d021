package lockstep

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/hashicorp/consul/api"
)

// Claim is a contender's hold on a slot by its Name (a node), as opposed to
// by its session: a grant writes it, and it outlives the session. A process
// that dies mid-step leaves its node half replaced, and that node is down
// because of the rollout until its process returns and finishes or undoes
// the step; so the claim keeps counting against K until then: until it is
// released, or reported lost (MarkLost), whatever any clock says. Release
// removes it.
type Claim struct {
	// Session is the session that took or last reclaimed the slot.
	Session string `json:"session"`
	// Since is when the slot was granted or last reclaimed, on the clock
	// of the host that wrote the claim.
	Since time.Time `json:"since"`
	// Until is Since plus the lease (Gate.Lease), on the same clock. Only
	// their difference, the lease, decides anything: how long a waiter
	// must itself see the claim orphaned before it reports it lost (see
	// LostError). Until is kept for status displays: a claim cannot be
	// reported lost before it, give or take the skew between the clocks
	// of the host that wrote it and of the one that reads it.
	Until time.Time `json:"until"`
	// Note is the caller's, from Writes.Note: what the step was for (a SHA).
	Note string `json:"note,omitempty"`
	// Lost says a waiter saw the claim's session gone, and the claim
	// unchanged, for the claim's whole lease, and reported it (MarkLost):
	// it no longer counts, and is kept so that the node's own process,
	// when it returns, finds its slot.
	Lost bool `json:"lost,omitempty"`
	// Domain is the Options.Domain of the contender that wrote the claim,
	// "" for none: the claim counts in it (Gate.PerDomain) whether or not
	// the node's process is alive to say where it is.
	Domain string `json:"domain,omitempty"`
}

// counts says whether the claim uses one of K: until it is reported lost.
func (c Claim) counts() bool { return !c.Lost }

// orphaned says the claim counts while its session holds no slot: the
// session is gone (its process or host died, or its liveness check
// failed), or, for a claim that ClaimDown wrote, has not reclaimed it yet.
func (c Claim) orphaned(live map[string]Entry) bool {
	_, ok := live[c.Session]
	return !ok && !c.Lost
}

// lease is how long a waiter must see the claim orphaned before it
// reports it lost: a duration, so the clock that wrote the claim's times
// and the clock that judges it need not agree.
func (c Claim) lease() time.Duration { return max(c.Until.Sub(c.Since), 0) }

// same says o is the claim c, not one written since (a reclaim, a new
// grant): a waiter's watch of an orphaned claim starts again on any write.
func (c Claim) same(o Claim) bool {
	return c.Session == o.Session && c.Since.Equal(o.Since) && c.Until.Equal(o.Until)
}

// LostError is returned by Acquire to the contender that, at the head of
// the line, has watched a claim of another name be orphaned (its session
// gone) and unchanged for the claim's whole lease, on its own monotonic
// clock: its node never came back from its step. The caller records that
// (a failure of the node's, say) and then calls MarkLost, after which the
// claim no longer counts; until then it still holds the line.
type LostError struct {
	Name  string
	Claim Claim
	// Watched is how long this contender saw the claim orphaned.
	Watched time.Duration
}

func (e *LostError) Error() string {
	return fmt.Sprintf("lockstep: %s lost its slot: its session ended and it was not back within %s", e.Name, e.Watched.Round(time.Second))
}

// Is makes errors.Is(err, ErrClaimLost) true.
func (e *LostError) Is(target error) bool { return target == ErrClaimLost }

// budget counts the names that use a slot: live holders, and claims that
// count. It returns the claims of other names that are orphaned, for the
// caller to watch (Semaphore.judge).
func (s *snapshot) budget(self string) (busy []string, orphans map[string]Claim) {
	names := map[string]bool{}
	for _, e := range s.live {
		names[e.Name] = true
	}
	for _, n := range s.unread {
		names[n] = true
	}
	for _, n := range s.unreadSlots {
		// A name of no one's ("/" is in it): a claim the read could not
		// see, which counts apart from every other.
		names[fmt.Sprintf("%s%d", slotsPrefix, n)] = true
	}
	for name, c := range s.holders.Claims {
		if !c.counts() {
			continue
		}
		names[name] = true
		if c.orphaned(s.live) && name != self {
			if orphans == nil {
				orphans = map[string]Claim{}
			}
			orphans[name] = c
		}
	}
	for n := range names {
		busy = append(busy, n)
	}
	sort.Strings(busy)
	return busy, orphans
}

// uses says name holds or claims a slot, as read: a live holder key or a
// claim that counts, not a key a bounded read left unread (s.unread).
func (s *snapshot) uses(name string) bool {
	if c, ok := s.holders.Claims[name]; ok && c.counts() {
		return true
	}
	for _, e := range s.live {
		if e.Name == name {
			return true
		}
	}
	return false
}

// orphanSeen is when this contender first saw a claim orphaned, on its own
// clock: a reading of time.Now, whose monotonic part is what Sub uses.
type orphanSeen struct {
	claim Claim
	at    time.Time
}

// judge watches the orphaned claims of a read, on this contender's own
// monotonic clock: a claim is lost once this contender has seen it
// orphaned and unchanged for its whole lease. A claim that is no longer
// orphaned, or was written again, is watched anew from its next sighting;
// so is every claim after this Semaphore is made, which can make a report
// later than it need be, never sooner. Neither the claim's times nor the
// skew between hosts enter into it. It returns the first lost claim, by
// name, and how soon the next one may be, for the caller to read again
// then (0 when none is watched).
func (m *Semaphore) judge(orphans map[string]Claim) (lost *LostError, wake time.Duration) {
	now := m.now()
	for name, w := range m.orphans {
		if c, ok := orphans[name]; !ok || !c.same(w.claim) {
			delete(m.orphans, name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(orphans)) {
		c := orphans[name]
		w, ok := m.orphans[name]
		if !ok {
			w = orphanSeen{claim: c, at: now}
			m.orphans[name] = w
		}
		watched := now.Sub(w.at)
		switch left := c.lease() - watched; {
		case left <= 0 && lost == nil:
			lost = &LostError{Name: name, Claim: c, Watched: watched}
		case left > 0 && (wake == 0 || left < wake):
			wake = left
		}
	}
	return lost, wake
}

// grantedSlot is what a grant to this contender writes into slot r: its
// name and session, and its claim (with Gate.Lease), which takes over a
// claim of our name left by a session of ours that died; without a lease
// that claim ends with this grant, as the slot is the session's alone.
func (m *Semaphore) grantedSlot(r slotRef, g Gate, note string, now time.Time) slotRec {
	sr := slotRec{Name: m.opts.Name, Session: m.s.ID(), Domain: m.opts.Domain, Released: r.rec.Released}
	if g.Lease > 0 {
		c := m.claim(g, note, now)
		sr.Claim = &c
	}
	return sr
}

// claim is the claim a grant, reclaim or ClaimDown of this contender
// writes at now.
func (m *Semaphore) claim(g Gate, note string, now time.Time) Claim {
	return Claim{Session: m.s.ID(), Since: now.UTC(), Until: now.Add(g.Lease).UTC(), Note: note, Domain: m.opts.Domain}
}

// ClaimOf returns the claim the holders record keeps for name, if any.
func (h *Holders) ClaimOf(name string) (Claim, bool) {
	c, ok := h.Claims[name]
	return c, ok
}

// Counted lists the names that use a slot: live holders, and claims that
// are not reported lost. It takes no time: no clock ends a claim (see
// Claim).
func (h *Holders) Counted() []string {
	snap := &snapshot{live: h.Holding, holders: holders{Claims: h.Claims}}
	busy, _ := snap.budget("")
	return busy
}

// Live says whether session locks its holder key.
func (h *Holders) Live(session string) bool {
	_, ok := h.Holding[session]
	return ok
}

// MarkLost records that name's claim, the one judged lost (LostError's
// Claim), was reported lost, so that it stops counting. It is a no-op if
// the claim is gone or is another grant's since (a reclaim or a new
// down-claim, even by the same session: the judged claim's session and
// Since both), or if its session holds a slot again. It
// writes the record too, by CAS at the index it read, with the claim's
// slot key (if it has one): the mark frees a slot, and a head that counted
// before it must count again, or it would grant under Gate.Stagger with
// no wait after that freed slot. Marks are rare; releases, which write
// their slot key alone, are not. Consul errors are retried, up to
// releaseAttempts times, until ctx ends.
func (m *Semaphore) MarkLost(ctx context.Context, name string, judged Claim) error {
	_, err := m.MarkLostWith(ctx, name, judged, nil)
	return err
}

// MarkLostWith is MarkLost with the caller's ops in the mark's
// transaction, made by with at each try after the read that try decides
// on: what the caller records of the loss (the node's failure) is then
// written if and only if the claim is marked, so never for a claim its
// node reclaimed meanwhile, nor twice by two reporters. with is not called
// when the mark is a no-op; marked says whether this call wrote it. An op
// of the caller's that fails, unless denied, is taken for a write that
// came between, and the try is made again from a new read, as for
// lockstep's own ops. with may be nil.
func (m *Semaphore) MarkLostWith(ctx context.Context, name string, judged Claim, with func(context.Context) (api.TxnOps, error)) (marked bool, err error) {
	err = m.attempts(ctx, "mark lost", func() error {
		ops, err := m.markLostOps(ctx, name, judged)
		if err != nil || ops == nil {
			return err
		}
		var extra api.TxnOps
		if with != nil {
			if extra, err = with(ctx); err != nil {
				return err
			}
		}
		var te *TxnError
		if err := m.casAll(ctx, ops, extra); with != nil && errors.As(err, &te) && !isDenied(te.What) {
			return errRace
		} else if err != nil {
			return err
		}
		marked = true
		return nil
	})
	return marked, err
}

// markLostOps are the ops that mark name's claim, the one judged lost, as
// read now; none when there is nothing to mark (see MarkLost).
func (m *Semaphore) markLostOps(ctx context.Context, name string, judged Claim) (api.TxnOps, error) {
	snap, err := m.read(ctx, m.opts.Prefix+holdersKey, 0)
	if err != nil {
		return nil, err
	}
	c, ok := snap.holders.Claims[name]
	if _, live := snap.live[c.Session]; !ok || !c.sameGrant(judged) || c.Lost || live {
		return nil, nil
	}
	c.Lost = true
	rec := withClaim(snap.baseRecord(name), name, &c)
	if kept, ok := snap.record.Claims[name]; ok && !kept.sameGrant(c) && !snap.freedBy(kept) {
		// The record holds another grant of the name (an older
		// version's): the mark is the slot key's alone.
		rec = withClaim(rec, name, &kept)
	}
	if r, ok := snap.slotOf(name); ok && r.rec.Claim != nil && r.rec.Claim.same(c) {
		sr := r.rec
		sr.Claim, sr.Released = &c, sr.Released+1 // its slot is free again: a stagger counts from here
		ops := api.TxnOps{casSlot(m.opts.Prefix, r, sr), casRecord(m.opts.Prefix, rec, snap.holdersIndex)}
		return append(ops, snap.markOps(m.opts.Prefix, name)...), nil
	}
	rec.Released++
	ops := api.TxnOps{casRecord(m.opts.Prefix, rec, snap.holdersIndex)}
	return append(ops, snap.markOps(m.opts.Prefix, name)...), nil
}

// ClaimDown writes a claim for this contender's Name, whatever the count,
// if there is none: its node is down already (its workload unhealthy), so
// it uses one of K whether or not it holds a slot, and claiming it keeps
// the rollout from taking another node down beside it. Reclaim then takes
// it ahead of the line, so that a rollout heals the nodes that are down
// first. The gate is checked in the same transaction: nothing is claimed
// for a closed one. It raises the count, so it writes the record too.
func (m *Semaphore) ClaimDown(ctx context.Context, g Gate, note string) error {
	if err := g.validate(); err != nil {
		return err
	}
	if err := checkNote(note); err != nil {
		return err
	}
	now := m.now()
	err := m.attempts(ctx, "claim down", func() error {
		snap, err := m.read(ctx, m.opts.Prefix+holdersKey, 0)
		if err != nil {
			return err
		}
		if _, ok := snap.holders.Claims[m.opts.Name]; ok {
			return nil
		}
		r, err := snap.pick(m.opts.Name)
		if err != nil {
			return err
		}
		c := m.claim(g, note, now)
		sr := slotRec{Name: m.opts.Name, Session: m.s.ID(), Domain: m.opts.Domain, Claim: &c, Released: r.rec.Released}
		rec := withClaim(snap.baseRecord(m.opts.Name), m.opts.Name, &c)
		ops := api.TxnOps{casRecord(m.opts.Prefix, rec, snap.holdersIndex), casSlot(m.opts.Prefix, r, sr)}
		ops = append(ops, snap.markOps(m.opts.Prefix, m.opts.Name)...)
		return m.casAll(ctx, ops, g.checkOps())
	})
	var te *TxnError
	if errors.As(err, &te) && te.Op >= 0 && !isDenied(te.What) {
		return m.gateError(ctx, g, te.Op)
	}
	return err
}

// casAll runs cas, CASes of lockstep's keys, and extra in one
// transaction: a failed CAS is a race, to read again; a failed op of
// extra a *TxnError that names it.
func (m *Semaphore) casAll(ctx context.Context, cas, extra api.TxnOps) error {
	ok, resp, _, err := m.c.Txn().Txn(append(slices.Clone(cas), extra...), (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return consulErr{err}
	}
	if ok {
		return nil
	}
	op, what := firstTxnError(resp)
	if op >= 0 && op < len(cas) && !isDenied(what) {
		return errRace
	}
	if op >= len(cas) {
		op -= len(cas)
	}
	return &TxnError{Op: op, What: what}
}

// Reclaim takes over the slot that this contender's Name claims, left by a
// session of its own that ended (a process killed mid-step) or by a grant
// whose reply was lost, without waiting in line: the claim counts against
// K already, so taking it over takes no other node down. It checks no gate:
// a process back from the dead must hold its node's slot before it looks at
// what its step left, whatever the gate says now; g is what every Fence of
// the hold checks before a destructive step. ops go into the same
// transaction. It returns ErrNoClaim when there is no claim to take.
//
// The claim is renewed as a grant's would be: Since is now, Until a lease
// from now, Note is note; a waiter that watched it orphaned starts again.
// So a process whose session ended while it lived (a liveness blip) and
// that reclaims at once never loses its slot. Hold.Lapsed says whether it
// had stopped counting (reported lost): another may have been granted in
// its place, so its holder must move nothing forward.
func (m *Semaphore) Reclaim(ctx context.Context, g Gate, note string, ops ...*api.TxnOp) (*Hold, error) {
	if err := g.validate(); err != nil {
		return nil, err
	}
	if err := checkNote(note); err != nil {
		return nil, err
	}
	var h *Hold
	err := m.attempts(ctx, "reclaim", func() (err error) {
		h, err = m.reclaimOnce(ctx, g, note, ops)
		return err
	})
	if err != nil {
		return nil, err
	}
	return h, nil
}

// reclaimOnce writes the renewed claim into the name's slot key and its
// copy into the record, by CAS as a grant does: a claim that had stopped
// counting raises the count, and the copy names the grant a release of it
// will free (doc.go, "Slot keys: older versions").
func (m *Semaphore) reclaimOnce(ctx context.Context, g Gate, note string, extra api.TxnOps) (*Hold, error) {
	snap, err := m.read(ctx, m.opts.Prefix+holdersKey, 0)
	if err != nil {
		return nil, err
	}
	c, ok := snap.holders.Claims[m.opts.Name]
	if !ok {
		return nil, ErrNoClaim
	}
	m.mu.Lock()
	busy := m.active != nil
	m.mu.Unlock()
	if busy {
		return nil, errors.New("lockstep: this contender already holds a slot; release it first")
	}
	lapsed := !c.counts()
	r, err := snap.pick(m.opts.Name)
	if err != nil {
		return nil, err
	}
	c = m.claim(g, note, m.now())
	sr := slotRec{Name: m.opts.Name, Session: m.s.ID(), Domain: m.opts.Domain, Claim: &c, Released: r.rec.Released}
	// The renewed claim is a new grant of it: its copy in the record
	// moves with it, or a release of it would leave the old copy counting.
	rec := withClaim(snap.baseRecord(m.opts.Name), m.opts.Name, &c)
	ops := api.TxnOps{casSlot(m.opts.Prefix, r, sr), casRecord(m.opts.Prefix, rec, snap.holdersIndex)}
	ops = append(ops, snap.markOps(m.opts.Prefix, m.opts.Name)...)
	lock := len(ops)
	ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVLock, Key: m.hkey, Value: m.entry("holding"), Session: m.s.ID()}})
	ok, resp, _, err := m.c.Txn().Txn(append(ops, extra...), (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, consulErr{err}
	}
	if ok {
		m.log.Info("reclaimed the slot this node's claim holds", "lapsed", lapsed, "until", c.Until)
		h := m.newHold(g, resp, slotRef{n: r.n, rec: sr})
		h.lapsed = lapsed
		return h, nil
	}
	op, what := firstTxnError(resp)
	switch {
	case op < 0 || isDenied(what):
		return nil, &TxnError{Op: op, What: what}
	case op < lock:
		return nil, errRace
	case op == lock:
		m.s.lost("session cannot lock its holder key", errors.New(what))
		return nil, ErrSessionLost
	}
	return nil, &TxnError{Op: op - lock - 1, What: what}
}
