package lockstep

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"
)

// releaseAttempts bounds Release's retries on a CAS race.
const releaseAttempts = 20

// Hold is one granted slot.
type Hold struct {
	m     *Semaphore
	g     Gate
	index uint64 // ModifyIndex of our holder key when granted
	since time.Time
	// slot is the slot key as the grant or reclaim wrote it, so that
	// Release can CAS it without reading it first. Its index is 0 when
	// unknown (an adopted hold).
	slot      slotRef
	releasing atomic.Bool // our own release deletes our holder key: not a loss
	// lapsed says a reclaimed claim had stopped counting (see Reclaim).
	lapsed bool

	lost     chan struct{}
	lostOnce sync.Once
	stop     context.CancelFunc

	mu       sync.Mutex
	released bool
}

func (m *Semaphore) newHold(g Gate, resp *api.TxnResponse, slot slotRef) *Hold {
	var index uint64
	for _, r := range resp.Results {
		if r.KV != nil && r.KV.Key == m.hkey {
			index = r.KV.ModifyIndex
		}
	}
	slot.index = slotResult(m.opts.Prefix, resp, slot.n)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.active = startHold(m, g, index)
	m.active.slot = slot
	return m.active
}

func startHold(m *Semaphore, g Gate, index uint64) *Hold {
	ctx, stop := context.WithCancel(context.Background())
	h := &Hold{m: m, g: g, index: index, lost: make(chan struct{}), since: time.Now(), stop: stop}
	go h.watch(ctx)
	return h
}

// Lapsed says the claim this hold reclaimed had stopped counting against
// K when it was reclaimed: others may have been granted in its place, so
// its holder may resolve what its node's step left, but move nothing
// forward. False for a hold granted in line.
func (h *Hold) Lapsed() bool { return h.lapsed }

// Gate is the gate the slot was granted against.
func (h *Hold) Gate() Gate { return h.g }

// Lost closes when the hold is gone without Release: the session ended or
// our holder key was removed. It closes at once when Session.Done does, and
// otherwise when the hold's watch sees the key go, which begins watchAfter
// after the grant. A holder must stop acting when it closes; Fence fails
// from then on in any case, from the moment the hold is gone.
func (h *Hold) Lost() <-chan struct{} { return h.lost }

func (h *Hold) markLost() { h.lostOnce.Do(func() { close(h.lost) }) }

// watchAfter is how long after the grant the hold starts watching its
// holder key. The grant checked the key and every Fence checks it again, so
// a watch adds no safety, only a sooner Lost; a hold released before then
// (a quick replacement) never pays for the watch's request, nor for the
// connection that cancelling a blocking query closes. That is one request
// per turn less for a fleet, and one connection fewer to open again.
const watchAfter = time.Second

// watch blocks on our holder key, which exists for as long as we hold, so it
// wakes only for us. The first query asks from the grant's index, so a key
// gone before the watch began is seen at once.
func (h *Hold) watch(ctx context.Context) {
	m := h.m
	start := time.NewTimer(watchAfter)
	defer start.Stop()
	select {
	case <-m.s.Done():
		h.markLost()
		return
	case <-ctx.Done():
		return
	case <-start.C:
	}
	// The session's end closes Lost at once, also while Consul does not
	// answer: the watch retries its errors, and would see nothing until
	// Consul is back, while the session may already be gone.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-m.s.Done():
			cancel()
		case <-wctx.Done():
		}
	}()
	gone := m.watchKey(wctx, "watch hold", m.hkey, h.index, func(p *api.KVPair, last uint64) (uint64, bool) {
		return last, p == nil || p.Session != m.s.ID()
	})
	select {
	case <-m.s.Done():
		h.markLost()
	default:
		if gone && !h.releasing.Load() {
			h.markLost()
		}
	}
}

// Fence runs ops only if the gate is still open and this hold is still
// held, all in one transaction. Call it right before every destructive step,
// with the step's own bookkeeping writes as ops, the first step's too:
// Acquire's grant checks the same, but only as of its own transaction, and
// whatever runs between it and the step widens the window that a CANCEL
// applied meanwhile cannot close. The error is ErrSuperseded,
// one wrapping ErrCancelled, ErrSessionLost, ErrNotHeld, a *TxnError for a
// failed op of the caller's, or a Consul error; on any of them nothing was
// written.
func (h *Hold) Fence(ctx context.Context, ops ...*api.TxnOp) (*api.TxnResponse, error) {
	return h.fenced(ctx, h.g.checkOps(), ops)
}

// fenced runs ops in one transaction with checks (the gate's, or none)
// and the check that this hold is still held.
func (h *Hold) fenced(ctx context.Context, checks, ops api.TxnOps) (*api.TxnResponse, error) {
	if h.isReleased() {
		return nil, ErrNotHeld
	}
	select {
	case <-h.lost:
		return nil, ErrSessionLost
	default:
	}
	m := h.m
	base := len(checks)
	all := append(slices.Clone(checks), &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCheckSession, Key: m.hkey, Session: m.s.ID()}})
	all = append(all, ops...)
	ok, resp, _, err := m.c.Txn().Txn(all, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, consulErr{err}
	}
	if ok {
		return resp, nil
	}
	op, what := firstTxnError(resp)
	switch {
	case op < 0 || isDenied(what):
		return nil, &TxnError{Op: op, What: what}
	case op < base:
		return nil, m.gateError(ctx, h.g, op)
	case op == base:
		h.markLost()
		return nil, ErrSessionLost
	}
	return nil, &TxnError{Op: op - base - 1, What: what}
}

func (h *Hold) isReleased() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.released
}

// Release gives the slot back: one transaction removes us from the holders
// record and deletes our holder key, which wakes the head of the line. It
// works whether or not the gate is still open, and retries Consul errors
// with backoff, releaseAttempts times at most, until ctx ends. If
// it fails, the holder key goes with the Session; a claim (Gate.Lease)
// stays until Reclaim takes it back or a waiter reports it lost.
//
// ops go into the same transaction, which saves the last step's own write a
// round trip of its own. They are not fenced (a release must work once the
// gate is closed or the session lost), so use them only for records that are
// true whatever the gate says, such as what now runs. If Consul refuses one,
// Release returns a *TxnError naming it and the slot is still held.
func (h *Hold) Release(ctx context.Context, ops ...*api.TxnOp) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.released {
		return ErrNotHeld
	}
	h.releasing.Store(true)
	defer func() {
		if !h.released {
			h.releasing.Store(false)
		}
	}()
	first := true
	err := h.m.attempts(ctx, "release", func() error {
		err := h.releaseOnce(ctx, first, ops)
		first = false
		return err
	})
	if err != nil {
		return err
	}
	h.released = true
	h.stop()
	h.m.forget(h)
	h.m.log.Debug("released slot", "held", time.Since(h.since))
	return nil
}

// forget clears the active hold once it is released.
func (m *Semaphore) forget(h *Hold) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.active == h {
		m.active = nil
	}
}

// releaseOnce tries one release transaction. The first try frees our
// slot key as our grant left it, which no one else writes while we hold:
// one transaction, on keys of our own. Later tries, an adopted hold, and
// a release under a stagger (which must move the record: doc.go, "Slot
// keys") read first.
func (h *Hold) releaseOnce(ctx context.Context, first bool, extra api.TxnOps) error {
	m := h.m
	// Deleting our holder key wakes the head of the line.
	ops := api.TxnOps{{KV: &api.KVTxnOp{Verb: api.KVDelete, Key: m.hkey}}, {KV: &api.KVTxnOp{Verb: api.KVDelete, Key: m.key}}}
	if first && h.slot.index != 0 && h.g.Stagger <= 0 {
		ops = append(ops, casSlot(m.opts.Prefix, h.slot, freed(h.slot.rec)))
	} else {
		snap, err := m.read(ctx, m.opts.Prefix+holdersKey, 0)
		if err != nil {
			return err
		}
		ops = append(ops, m.releaseOps(snap, h.g.Stagger > 0)...)
	}
	base := len(ops)
	ops = append(ops, extra...)
	txnCount.releases.Add(1)
	ok, resp, _, err := m.c.Txn().Txn(ops, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return consulErr{err}
	}
	if !ok {
		op, what := firstTxnError(resp)
		switch {
		case isDenied(what):
			return &TxnError{Op: op, What: what}
		case op >= base:
			return &TxnError{Op: op - base, What: what}
		}
		return errRace
	}
	return nil
}

// releaseOps free our name's slot key, as read in snap, and write the
// record when it must change: it keeps a claim of our name that is no
// copy of our slot's (an older version's), a stagger is in force, or we
// have no slot key whose count the release can move. A copy of our
// slot's claim stays in the record: the freed slot names its grant, so
// it counts no more, and the next writer of the record prunes it.
func (m *Semaphore) releaseOps(snap *snapshot, stagger bool) api.TxnOps {
	var ops api.TxnOps
	r, inSlot := snap.slotOf(m.opts.Name)
	if inSlot {
		ops = append(ops, casSlot(m.opts.Prefix, r, freed(r.rec)))
	}
	kept, ok := snap.record.Claims[m.opts.Name]
	if ok && inSlot && r.rec.Claim != nil && r.rec.Claim.sameGrant(kept) {
		ok = false
	}
	if ok || stagger || !inSlot {
		rec := snap.baseRecord(m.opts.Name)
		if !inSlot {
			rec.Released++
		}
		ops = append(ops, casRecord(m.opts.Prefix, rec, snap.holdersIndex))
		ops = append(ops, snap.markOps(m.opts.Prefix, m.opts.Name)...)
	}
	return ops
}

// freed is slot key sr as its release leaves it: no one's, its count one
// more, and naming the grant released, for the copy of its claim in the
// record.
func freed(sr slotRec) slotRec {
	out := slotRec{Released: sr.Released + 1}
	if sr.Claim != nil {
		id := sr.Claim.id()
		out.Freed = &id
	}
	return out
}

// Drop lets go of the hold in this process without releasing it: the
// holder key and the node's claim stay, so that the slot is still held by
// the node, and Reclaim takes it back. Fence and Release fail from then on.
func (h *Hold) Drop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.released {
		return
	}
	h.released = true
	h.stop()
	h.m.forget(h)
}

// Check runs ops only while this hold is still held, whatever the gate
// says now, in one transaction: for the one step that may go on behind a
// closed gate, the end of a step its holder began behind a passed Fence
// (an undo that the runtime failed, say). Its errors are Fence's, less
// the gate's.
func (h *Hold) Check(ctx context.Context, ops ...*api.TxnOp) (*api.TxnResponse, error) {
	return h.fenced(ctx, nil, ops)
}
