package lockstep

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/internal/readlimit"
)

// errRace means another contender changed the holders record between our
// read and our transaction: re-read and try again at once.
var errRace = errors.New("lockstep: holders record changed")

// waitTurn waits in line until this contender holds a slot. It learns who
// joined just before it from the join (j), or, when that could not be told,
// lists the prefix; from then on it watches only the last waiter ahead of
// it, and once it heads the line, only the holders (the record and the
// keys under P/.holders/). So a release or a death wakes one or two
// waiters, never the whole line, and what they read is O(K) bytes, not the
// line. It lists the line only when the waiter ahead leaves it without a
// grant (it gave up or died).
func (m *Semaphore) waitTurn(ctx context.Context, g Gate, w Writes, j joined) (*Hold, error) {
	var ahead []contender
	whole := false // ahead is everyone ahead of us, not just the last
	if j.pred != nil && !j.holds {
		ahead = []contender{*j.pred}
	}
	for {
		if ahead == nil {
			snap, a, err := m.joinLine(ctx)
			if err != nil {
				return nil, err
			}
			if _, holds := snap.live[m.s.ID()]; holds {
				return m.adopt(ctx, g, w.Grant)
			}
			ahead, whole = a, true
		}
		head, since, err := m.waitAhead(ctx, ahead, whole)
		if err != nil {
			return nil, err
		}
		if head {
			return m.headTurn(ctx, g, w, since)
		}
		ahead, whole = nil, false
	}
}

// joinLine reads the whole prefix, retrying Consul errors, and returns it
// with the waiters ahead of us.
func (m *Semaphore) joinLine(ctx context.Context) (*snapshot, []contender, error) {
	r := m.retry()
	for {
		if ctx.Err() != nil {
			return nil, nil, context.Cause(ctx)
		}
		snap, err := m.read(ctx, m.opts.Prefix, 0)
		if err != nil {
			r.wait(ctx, "read semaphore", err)
			continue
		}
		if _, holds := snap.live[m.s.ID()]; holds {
			return snap, nil, nil
		}
		ahead, ok := snap.ahead(m.s.ID())
		if !ok {
			m.s.lost("contender key is gone", nil)
			return nil, nil, ErrSessionLost
		}
		return snap, ahead, nil
	}
}

// waitAhead blocks on the last waiter ahead of us until it is granted a
// slot, which the grant writes into its key: FIFO means everyone ahead of
// it went first, so we head the line, and since is the index of that
// grant. If instead its key goes (it gave up, died, or was granted and
// released before we looked) or comes back under the same name with a new
// CreateIndex (it left and joined again, behind us), it reports false
// unless ahead is the whole line ahead of us and no one else was in it:
// the line must be read again.
func (m *Semaphore) waitAhead(ctx context.Context, ahead []contender, whole bool) (head bool, since uint64, err error) {
	if len(ahead) == 0 {
		return true, 0, nil
	}
	pred := ahead[len(ahead)-1]
	left := false // its key went, or is another's
	// Its key is its own node's to write: one over keyLimit is taken for
	// gone, and the line read again (where it is left out).
	done := m.watchKey(readlimit.With(ctx, keyLimit), "wait in line", pred.Key, pred.ModifyIndex, func(p *api.KVPair, _ uint64) (uint64, bool) {
		switch {
		case p == nil || p.Session != pred.Session || p.CreateIndex != pred.CreateIndex:
			left = true
			return 0, true
		case isHolding(p.Value):
			since = p.ModifyIndex
			return 0, true
		}
		return p.ModifyIndex, false
	})
	switch {
	case !done:
		return false, 0, context.Cause(ctx)
	case !left:
		return true, since, nil
	case whole && len(ahead) == 1:
		return true, 0, nil
	}
	return m.grantedLast(ctx, pred)
}

// grantedLast tells, once the key of the waiter ahead is gone, whether it
// went with a release after a grant: then that waiter had the latest grant,
// as no one behind it may be granted before us, and we head the line. If
// the holders record names another, it left the line without a grant, and
// the line must be read to find who is ahead of us now.
func (m *Semaphore) grantedLast(ctx context.Context, pred contender) (head bool, since uint64, err error) {
	r := m.retry()
	for {
		if ctx.Err() != nil {
			return false, 0, context.Cause(ctx)
		}
		snap, err := m.read(ctx, m.opts.Prefix+holdersKey, 0)
		if err != nil {
			r.wait(ctx, "read holders", err)
			continue
		}
		last := snap.holders.Last
		return last != nil && last.Session == pred.Session && last.Joined == pred.CreateIndex, 0, nil
	}
}

func isHolding(v []byte) bool {
	var e Entry
	return json.Unmarshal(v, &e) == nil && e.State == "holding"
}

// headTurn runs at the head of the line: it watches the holders and takes
// a slot as soon as fewer than K of them are live. since is the index of
// the grant that put us at the head, or 0. At K = 1 that grant took the
// only slot, and it wrote the holders at that very index, so the first
// read can block from it: it returns once the holder has left, and a read
// at once would only show the slot taken. w.Check is asked right before
// each try of the grant.
func (m *Semaphore) headTurn(ctx context.Context, g Gate, w Writes, since uint64) (*Hold, error) {
	r := m.retry()
	var index uint64
	if g.limit() == 1 {
		index = since
	}
	wait := m.opts.WaitTime
	for {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		snap, err := m.readWait(ctx, m.opts.Prefix+holdersKey, index, wait)
		if err != nil {
			r.wait(ctx, "read holders", err)
			continue
		}
		if _, holds := snap.live[m.s.ID()]; holds {
			return m.adopt(ctx, g, w.Grant)
		}
		next, full, err := m.headWait(ctx, g, snap)
		switch {
		case isConsulErr(err):
			r.wait(ctx, "count unavailable", err)
			continue
		case err != nil:
			return nil, err
		case next > 0:
			index, wait = snap.index, next
			if full {
				r.reset()
			}
			continue
		}
		if w.Check != nil {
			if err := w.Check(ctx); err != nil {
				return nil, err
			}
		}
		h, err := m.take(ctx, g, snap, w.Grant())
		switch {
		case err == nil:
			return h, nil
		case errors.Is(err, errRace):
		case isConsulErr(err):
			m.unsure = true // the grant may have been applied all the same
			r.wait(ctx, "take slot", err)
		default:
			return nil, err
		}
		index = 0
	}
}

// headWait says how long the head of the line, having read snap, waits
// for the holders to change before it reads them again: 0 when it may take
// a slot now. full says the slots are taken by holders and claims, rather
// than by nodes that are down outside the line, which no write wakes us
// for when they come back.
func (m *Semaphore) headWait(ctx context.Context, g Gate, snap *snapshot) (wait time.Duration, full bool, err error) {
	busy, orphans := snap.budget(m.opts.Name)
	lost, wake := m.judge(orphans)
	// Our own claim, counted already, is taken over by our grant: it adds
	// no node. One that no longer counts (reported lost) takes nothing, so
	// we wait as anyone would. A key of our name that a bounded read left
	// unread is no slot we know we use: it is counted as our grant would
	// be, once, so our grant must fit beside the others.
	ours := snap.uses(m.opts.Name)
	if !ours {
		busy = slices.DeleteFunc(busy, func(n string) bool { return n == m.opts.Name })
	}
	near := snap.sameDomain(m.opts.Domain, m.opts.Name, busy)
	switch {
	case lost != nil:
		return 0, false, lost
	case ours:
		return 0, false, nil
	case len(busy) >= g.limit() || m.domainFull(g, len(near)):
		// No write marks the end of an orphaned claim's watch: wake then
		// to judge it again.
		if len(busy) < g.limit() {
			m.log.Debug("waiting: our domain is full", "domain", m.opts.Domain, "busy", near)
		}
		wait = m.opts.WaitTime
		if wake > 0 {
			wait = min(wait, wake+10*time.Millisecond)
		}
		return wait, true, nil
	}
	if left := m.staggerLeft(g, snap); left > 0 {
		m.log.Debug("waiting: stagger after the latest release", "left", left)
		return min(left, m.opts.WaitTime), false, nil
	}
	// Only now can nodes that are down keep us waiting: asked for no
	// sooner, as it is a round trip before the grant.
	down, err := m.unavailable(ctx, busy)
	if err != nil {
		return 0, false, err
	}
	if len(down) > 0 && len(busy)+len(down) >= g.limit() {
		m.log.Debug("waiting: nodes outside the line are down", "busy", busy, "down", down)
		return UnavailablePoll, false, nil
	}
	downNear, err := m.downInDomain(ctx, g, down)
	if err != nil {
		return 0, false, err
	}
	if len(downNear) > 0 && m.domainFull(g, len(near)+len(downNear)) {
		m.log.Debug("waiting: nodes of our domain are down", "domain", m.opts.Domain, "busy", near, "down", downNear)
		return UnavailablePoll, false, nil
	}
	return 0, false, nil
}

// unavailable lists the names Options.Unavailable lists that are neither
// busy already nor this contender.
func (m *Semaphore) unavailable(ctx context.Context, busy []string) ([]string, error) {
	if m.opts.Unavailable == nil {
		return nil, nil
	}
	names, err := m.opts.Unavailable(ctx)
	if err != nil {
		return nil, consulErr{err}
	}
	var out []string
	for _, name := range names {
		if name != m.opts.Name && !slices.Contains(busy, name) && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out, nil
}

// read lists prefix (the semaphore's, or its holders'), blocking while its
// index is still index.
func (m *Semaphore) read(ctx context.Context, prefix string, index uint64) (*snapshot, error) {
	return m.readWait(ctx, prefix, index, m.opts.WaitTime)
}

// readWait is read with a blocking query of at most wait. The listing
// is bounded (listLimit): past it, this read and the next ones of this
// Semaphore read key by key (readSplit), each key bounded, until one
// finds nothing left unread, so that keys a node's token wrote under the
// prefix do not make each read download them.
func (m *Semaphore) readWait(ctx context.Context, prefix string, index uint64, wait time.Duration) (*snapshot, error) {
	if m.split.Load() {
		snap, err := m.readSplit(ctx, prefix, index, wait)
		if err == nil && snap.problem == "" {
			m.split.Store(false)
			m.folders.Store(false)
		}
		return snap, err
	}
	q := (&api.QueryOptions{WaitIndex: index, WaitTime: max(wait, time.Millisecond)}).WithContext(readlimit.With(ctx, m.listLimit(prefix)))
	pairs, meta, err := m.c.KV().List(prefix, q)
	var tl *readlimit.TooLargeError
	switch {
	case errors.As(err, &tl):
		// The listing came back, so the prefix moved past index: read it
		// at once.
		m.split.Store(true)
		return m.readSplit(ctx, prefix, 0, wait)
	case err != nil:
		return nil, consulErr{err}
	}
	return parseSnapshot(m.opts.Prefix, pairs, meta.LastIndex), nil
}

// take grants this contender a slot in one transaction: the gate is open,
// our session still locks our contender key, the holders record is
// unchanged since we counted fewer than K in the snapshot (whatever raised
// the count since wrote it: see doc.go, "Slot keys"), and the slot we take
// is still as read. It creates our holder key, whose end wakes the next
// head when we release or die, and marks our contender key as holding,
// which tells the waiter behind us that it heads the line now. The
// caller's ops come last.
func (m *Semaphore) take(ctx context.Context, g Gate, snap *snapshot, extra api.TxnOps) (*Hold, error) {
	if snap.bad != nil {
		m.log.Warn("overwriting the holders record or a slot key", "error", snap.bad)
	}
	r, err := snap.pick(m.opts.Name)
	if err != nil {
		return nil, err
	}
	sr := m.grantedSlot(r, g, m.note, m.now())
	rec := withClaim(snap.baseRecord(m.opts.Name), m.opts.Name, sr.Claim)
	rec.Last = &grant{Session: m.s.ID(), Joined: m.joined}
	ops := g.checkOps()
	gate := len(ops)
	ops = append(ops, g.GrantChecks...)
	base := len(ops)
	ops = append(ops,
		&api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCheckSession, Key: m.key, Session: m.s.ID()}},
		casRecord(m.opts.Prefix, rec, snap.holdersIndex),
		casSlot(m.opts.Prefix, r, sr),
		&api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVLock, Key: m.hkey, Value: m.entry("holding"), Session: m.s.ID()}},
		&api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVLock, Key: m.key, Value: m.entry("holding"), Session: m.s.ID()}},
	)
	ops = append(ops, snap.markOps(m.opts.Prefix, m.opts.Name)...)
	own := len(ops)
	ops = append(ops, extra...)
	txnCount.grants.Add(1)
	ok, resp, _, err := m.c.Txn().Txn(ops, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, consulErr{err}
	}
	if ok {
		return m.newHold(g, resp, slotRef{n: r.n, rec: sr}), nil
	}
	op, what := firstTxnError(resp)
	switch {
	case op < 0 || isDenied(what):
		return nil, &TxnError{Op: op, What: what}
	case op < gate:
		return nil, m.gateError(ctx, g, op)
	case op < base:
		return nil, ErrGateStale
	case op == base:
		m.s.lost("session no longer locks its contender key", nil)
		return nil, ErrSessionLost
	case op == base+1 || op == base+2:
		return nil, errRace
	case op == base+3:
		// Our holder key is ours alone: it can only be refused (a lock
		// delay, an invalid session) once Consul has dropped our session.
		m.s.lost("session cannot lock its holder key", errors.New(what))
		return nil, ErrSessionLost
	case op >= own:
		return nil, &TxnError{Op: op - own, What: what}
	case op >= base+5:
		return nil, errRace
	}
	return nil, &TxnError{Op: op, What: what}
}

// adopt takes over a slot the records say this session holds: a grant whose
// reply was lost to a Consul failure, or a release that never landed. Only
// one live Hold per Semaphore is allowed, so a second is an error. The
// grant that is adopted may not have carried ops, so a Fence writes them.
func (m *Semaphore) adopt(ctx context.Context, g Gate, opsFn func() api.TxnOps) (*Hold, error) {
	ops := opsFn()
	h, err := m.adoptHold(g)
	if err != nil || len(ops) == 0 {
		return h, err
	}
	if _, err := h.Fence(ctx, ops...); err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if rerr := h.Release(rctx); rerr != nil {
			m.log.Warn("could not release an adopted slot; the next look of its node, or the end of its session, frees it", "error", rerr)
		}
		return nil, err
	}
	return h, nil
}

func (m *Semaphore) adoptHold(g Gate) (*Hold, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.active != nil {
		return nil, errors.New("lockstep: this contender already holds a slot; release it first")
	}
	m.log.Info("adopting a slot the records say we hold")
	m.dequeue() // our key says "waiting": the one behind us reads the line again
	m.active = startHold(m, g, 0)
	return m.active, nil
}

func isDenied(what string) bool { return strings.Contains(strings.ToLower(what), "permission denied") }

func firstTxnError(resp *api.TxnResponse) (int, string) {
	if resp == nil || len(resp.Errors) == 0 {
		return -1, "transaction rolled back without an error"
	}
	e := resp.Errors[0]
	for _, x := range resp.Errors[1:] {
		if x.OpIndex < e.OpIndex {
			e = x
		}
	}
	return e.OpIndex, e.What
}

// consulErr marks an error talking to Consul, which is retried with backoff,
// as opposed to an answer, which is acted on.
type consulErr struct{ err error }

func (e consulErr) Error() string { return fmt.Sprintf("lockstep: consul: %v", e.err) }
func (e consulErr) Unwrap() error { return e.err }

// IsTransient reports whether err is a failure to talk to Consul, such as
// during a leader election, as opposed to an answer such as a closed gate:
// the same call may succeed when retried.
func IsTransient(err error) bool { return isConsulErr(err) }

func isConsulErr(err error) bool {
	var c consulErr
	return errors.As(err, &c)
}
