package lockstep

import (
	"context"
	"encoding/json"
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
// the step; so the claim keeps counting against K until then, or until the
// lease the grant gave it (Gate.Lease) runs out. Release removes it.
type Claim struct {
	// Session is the session that took or last reclaimed the slot.
	Session string `json:"session"`
	// Since is when the slot was granted.
	Since time.Time `json:"since"`
	// Until is when the claim stops counting once its session is gone: the
	// grant's time plus Gate.Lease, on the granting host's clock.
	Until time.Time `json:"until"`
	// Note is the caller's, from Writes.Note: what the step was for (a SHA).
	Note string `json:"note,omitempty"`
	// Lost says the lease ran out without the claim's session and that a
	// waiter has reported it (MarkLost): it no longer counts, and is kept
	// so that the node's own process, when it returns, finds its slot.
	Lost bool `json:"lost,omitempty"`
}

// counts says whether the claim uses one of K at now, given the sessions
// that are live.
func (c Claim) counts(live map[string]Entry, now time.Time) bool {
	if _, ok := live[c.Session]; ok {
		return true
	}
	return !c.Lost && now.Before(c.Until)
}

// expired says the claim's session is gone and its lease has run out, and
// no one has reported it yet.
func (c Claim) expired(live map[string]Entry, now time.Time) bool {
	_, ok := live[c.Session]
	return !ok && !c.Lost && !now.Before(c.Until)
}

// LostError is returned by Acquire to the contender that finds, at the head
// of the line, a claim whose session is gone and whose lease ran out: its
// node never came back from its step. The caller records that (a failure
// of the node's, say) and then calls MarkLost, after which the claim no
// longer counts; until then it still holds the line.
type LostError struct {
	Name  string
	Claim Claim
}

func (e *LostError) Error() string {
	return fmt.Sprintf("lockstep: %s lost its slot: its session ended and it was not back by %s", e.Name, e.Claim.Until.Format(time.RFC3339))
}

// Is makes errors.Is(err, ErrClaimLost) true.
func (e *LostError) Is(target error) bool { return target == ErrClaimLost }

// budget counts the names that use a slot at now: live holders, and claims
// that count. It reports the first expired claim of another name, and when
// the soonest lease of a dead claim runs out (zero when none), so that a
// waiter wakes then without a write to wake it.
func (s *snapshot) budget(self string, now time.Time) (busy []string, lost *LostError, wake time.Time) {
	names := map[string]bool{}
	for _, e := range s.live {
		names[e.Name] = true
	}
	for _, name := range slices.Sorted(maps.Keys(s.holders.Claims)) {
		c := s.holders.Claims[name]
		switch {
		case c.counts(s.live, now):
			names[name] = true
			if _, ok := s.live[c.Session]; !ok && (wake.IsZero() || c.Until.Before(wake)) {
				wake = c.Until
			}
		case c.expired(s.live, now) && name != self && lost == nil:
			lost = &LostError{Name: name, Claim: c}
		}
	}
	for n := range names {
		busy = append(busy, n)
	}
	sort.Strings(busy)
	return busy, lost, wake
}

// granted is the holders record after a grant to this contender: the live
// holders and every claim, with ours (new, or taken over from a dead
// session of our name) in it.
func (m *Semaphore) granted(snap *snapshot, g Gate, note string, now time.Time) holders {
	rec := holders{Holders: maps.Clone(snap.live), Last: &grant{Session: m.s.ID(), Joined: m.joined},
		Claims: maps.Clone(snap.holders.Claims)}
	if rec.Claims == nil {
		rec.Claims = map[string]Claim{}
	}
	rec.Holders[m.s.ID()] = Entry{Name: m.opts.Name, State: "holding", Since: now.UTC()}
	if g.Lease <= 0 {
		// The slot is the session's alone: a claim over our name, left by
		// a session of ours that died, ends with this grant.
		delete(rec.Claims, m.opts.Name)
		return rec
	}
	rec.Claims[m.opts.Name] = Claim{Session: m.s.ID(), Since: now.UTC(), Until: now.Add(g.Lease).UTC(), Note: note}
	return rec
}

// ClaimOf returns the claim the holders record keeps for name, if any.
func (h *Holders) ClaimOf(name string) (Claim, bool) {
	c, ok := h.Claims[name]
	return c, ok
}

// Counted lists the names that use a slot at now: live holders, and claims
// whose session is live or whose lease has not run out.
func (h *Holders) Counted(now time.Time) []string {
	snap := &snapshot{live: h.Holding, holders: holders{Claims: h.Claims}}
	busy, _, _ := snap.budget("", now)
	return busy
}

// Live says whether session locks its holder key.
func (h *Holders) Live(session string) bool {
	_, ok := h.Holding[session]
	return ok
}

// MarkLost records that name's claim, taken by session, was reported lost
// (see LostError), so that it stops counting. It is a no-op if the claim
// is gone or was taken over since. Consul errors are retried, up to
// DefaultReleaseAttempts times, until ctx ends.
func (m *Semaphore) MarkLost(ctx context.Context, name, session string) error {
	return m.editClaims(ctx, func(rec *holders) bool {
		c, ok := rec.Claims[name]
		if !ok || c.Session != session || c.Lost {
			return false
		}
		c.Lost = true
		rec.Claims[name] = c
		return true
	}, nil)
}

// ClaimDown writes a claim for this contender's Name, whatever the count,
// if there is none: its node is down already (its workload unhealthy), so
// it uses one of K whether or not it holds a slot, and claiming it keeps
// the rollout from taking another node down beside it. Reclaim then takes
// it ahead of the line, so that a rollout heals the nodes that are down
// first. The gate is checked in the same transaction: nothing is claimed
// for a closed one.
func (m *Semaphore) ClaimDown(ctx context.Context, g Gate, note string) error {
	if err := g.validate(); err != nil {
		return err
	}
	now := time.Now()
	err := m.editClaims(ctx, func(rec *holders) bool {
		if _, ok := rec.Claims[m.opts.Name]; ok {
			return false
		}
		rec.Claims[m.opts.Name] = Claim{Session: m.s.ID(), Since: now.UTC(), Until: now.Add(g.Lease).UTC(), Note: note}
		return true
	}, g.checkOps())
	var te *TxnError
	if errors.As(err, &te) && te.Op >= 0 && !isDenied(te.What) {
		return m.gateError(ctx, g, te.Op)
	}
	return err
}

// editClaims applies edit to the holders record and writes it by CAS,
// with extra ops in the same transaction, reading it again after a race.
// edit returns false when there is nothing to write.
func (m *Semaphore) editClaims(ctx context.Context, edit func(*holders) bool, extra api.TxnOps) error {
	return m.attempts(ctx, "edit claims", func() error {
		snap, err := m.read(ctx, m.opts.Prefix+holdersKey, 0)
		if err != nil {
			return err
		}
		rec := holders{Holders: snap.live, Last: snap.holders.Last, Claims: maps.Clone(snap.holders.Claims)}
		if rec.Claims == nil {
			rec.Claims = map[string]Claim{}
		}
		if !edit(&rec) {
			return nil
		}
		return m.casHolders(ctx, rec, snap.holdersIndex, extra)
	})
}

func (m *Semaphore) casHolders(ctx context.Context, rec holders, index uint64, extra api.TxnOps) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	ops := append(api.TxnOps{{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: m.opts.Prefix + holdersKey, Value: b, Index: index}}}, extra...)
	ok, resp, _, err := m.c.Txn().Txn(ops, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return consulErr{err}
	}
	if ok {
		return nil
	}
	op, what := firstTxnError(resp)
	if op == 0 && !isDenied(what) {
		return errRace
	}
	return &TxnError{Op: op - 1, What: what}
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
// from now, Note is note. Hold.Lapsed says whether it had stopped counting
// (marked lost, or past its lease with its session gone): another may have
// been granted in its place, so its holder must move nothing forward.
func (m *Semaphore) Reclaim(ctx context.Context, g Gate, note string, ops ...*api.TxnOp) (*Hold, error) {
	if err := g.validate(); err != nil {
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
	now := time.Now()
	lapsed := !c.counts(snap.live, now)
	rec := holders{Holders: maps.Clone(snap.live), Last: snap.holders.Last, Claims: maps.Clone(snap.holders.Claims)}
	rec.Holders[m.s.ID()] = Entry{Name: m.opts.Name, State: "holding", Since: now.UTC()}
	c = Claim{Session: m.s.ID(), Since: now.UTC(), Until: now.Add(g.Lease).UTC(), Note: note}
	rec.Claims[m.opts.Name] = c
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	ops := api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: m.opts.Prefix + holdersKey, Value: b, Index: snap.holdersIndex}},
		{KV: &api.KVTxnOp{Verb: api.KVLock, Key: m.hkey, Value: m.entry("holding"), Session: m.s.ID()}},
	}
	base := len(ops)
	ok, resp, _, err := m.c.Txn().Txn(append(ops, extra...), (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, consulErr{err}
	}
	if ok {
		m.log.Info("reclaimed the slot this node's claim holds", "lapsed", lapsed, "until", c.Until)
		h := m.newHold(g, resp, rec)
		h.lapsed = lapsed
		return h, nil
	}
	op, what := firstTxnError(resp)
	switch {
	case op < 0 || isDenied(what):
		return nil, &TxnError{Op: op, What: what}
	case op == 0:
		return nil, errRace
	case op == 1:
		m.s.lost("session cannot lock its holder key", errors.New(what))
		return nil, ErrSessionLost
	}
	return nil, &TxnError{Op: op - base, What: what}
}
