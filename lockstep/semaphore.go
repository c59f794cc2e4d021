package lockstep

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"
	"github.com/rollagent/rollagent/internal/wallclock"
)

const (
	// DefaultWaitTime bounds each blocking query. Longer means fewer idle
	// renewals; Consul caps it at 10 minutes.
	DefaultWaitTime = 5 * time.Minute
	// retryMin and retryMax bound the jittered backoff after a Consul
	// error.
	retryMin = 250 * time.Millisecond
	retryMax = 5 * time.Second
)

// Options configure a Semaphore.
type Options struct {
	// Prefix is the KV prefix that holds this semaphore. Required.
	Prefix string
	// Name says who contends (a node name): its claim is kept by it, and
	// its contender and holder keys are filed under it, so that a policy
	// may let each name write its own keys alone. One segment of a key: no
	// "/", and neither "." nor "..". Optional, defaults to the session ID.
	Name string
	// WaitTime of each blocking query. Optional, defaults to DefaultWaitTime.
	WaitTime time.Duration
	// Logger. Optional, defaults to a null logger.
	Logger hclog.Logger
	// Unavailable, when set, lists names that are down outside the line
	// (a node whose host or process is gone, or whose workload is
	// unhealthy): the head of the line counts them against K with the
	// holders and claims, and counts again every UnavailablePoll while
	// they fill it, as no write wakes it when they come back. Optional.
	Unavailable func(ctx context.Context) ([]string, error)
	// Releases remembers when this process first saw each release, for
	// Gate.Stagger: share one among the semaphores a process makes for one
	// prefix, so that a new one counts from the process's first sight, not
	// its own. Optional, defaults to a clock of the semaphore's own, which
	// counts from its first read (so waits longer, never shorter).
	Releases *ReleaseClock
	// Domain is this contender's failure domain (a rack, a zone), for
	// Gate.PerDomain: written into its holder entry and its claims. ""
	// is a domain of its own, shared with no one. Optional.
	Domain string
	// Domains, when set, gives the domain of each name, for the names
	// Options.Unavailable lists that neither hold nor claim a slot (whose
	// domain no entry carries): a name it leaves out is a domain of its
	// own. Asked only when a Gate.PerDomain bound could hold us.
	// Optional.
	Domains func(ctx context.Context) (map[string]string, error)
}

// UnavailablePoll is how often the head of the line counts again while
// names that Options.Unavailable lists fill the slots.
const UnavailablePoll = 500 * time.Millisecond

// Semaphore is one contender's handle on a counting semaphore in Consul.
type Semaphore struct {
	c    *api.Client
	s    *Session
	opts Options
	key  string // this contender's key, P/c/<name>/<session>, while it waits
	hkey string // its holder key, P/.holders/<name>/<session>, while it holds
	log  hclog.Logger
	// joined is the CreateIndex of our contender key, from our last join.
	joined uint64
	// note goes into our claim at the grant (Writes.Note).
	note string
	// unsure says a grant of this wait may have been applied with its
	// reply lost (take failed to reach Consul).
	unsure bool

	// now reads this contender's clock: time.Now, or a test's.
	now func() time.Time
	// orphans are the orphaned claims of other names that this contender
	// watches at the head of the line (judge).
	orphans map[string]orphanSeen

	// split says a listing of the prefix was over its bound: reads go
	// key by key (readSplit) until one leaves nothing unread.
	split atomic.Bool
	// folders says a listing of the names under the prefix was over its
	// bound: they are listed by folder (byFolder) until then too.
	folders atomic.Bool

	mu     sync.Mutex
	active *Hold // the hold not yet released, if any
	// problem is what the last bounded read left unread, as logged.
	problem string
}

// New returns a Semaphore for session s.
func New(c *api.Client, s *Session, opts Options) (*Semaphore, error) {
	if opts.Prefix == "" {
		return nil, errors.New("lockstep: Options.Prefix is required")
	}
	opts.Prefix = normPrefix(opts.Prefix)
	if opts.Name == "" {
		opts.Name = s.ID()
	}
	if !validName(opts.Name) || opts.Name == slotsName {
		return nil, fmt.Errorf("%w: %.80q must be one segment of a key: no \"/\", and neither \".\", \"..\" nor \""+slotsName+"\"", ErrBadName, opts.Name)
	}
	if opts.WaitTime <= 0 {
		opts.WaitTime = DefaultWaitTime
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.Releases == nil {
		opts.Releases = &ReleaseClock{}
	}
	return &Semaphore{c: c, s: s, opts: opts, key: ContenderKey(opts.Prefix, opts.Name, s.ID()),
		hkey: HolderKey(opts.Prefix, opts.Name, s.ID()), log: opts.Logger.With("contender", opts.Name),
		now: wallclock.Now, orphans: map[string]orphanSeen{}}, nil
}

// Acquire waits in line until a slot is free and the gate is open, and takes
// it in one transaction. It returns ErrSuperseded or an error wrapping
// ErrCancelled as soon as the gate closes, ErrSessionLost when the session
// goes, and ctx.Err() when ctx ends; it never returns a nil Hold with a nil
// error. On any error the contender key is removed again.
//
// The grant is a fence: it checks what Fence checks, and ops, the first
// step's own writes, go into the same transaction. So the holder may take
// its first step as soon as Acquire returns, without a Fence of its own.
// Make them plain sets: a grant whose reply was lost to a Consul failure is
// adopted, and its ops are written again. A *TxnError names an op of the
// caller's that Consul refused; nothing was written then and the caller is
// out of line.
func (m *Semaphore) Acquire(ctx context.Context, g Gate, ops ...*api.TxnOp) (*Hold, error) {
	return m.AcquireWith(ctx, g, Writes{Grant: func() api.TxnOps { return ops }})
}

// Writes are a caller's records that ride on Acquire's own transactions,
// each saving a write of its own.
type Writes struct {
	// Join goes into the transaction that puts the contender in line, when
	// the wait begins: records true whatever comes of the wait, such as a
	// node's "waiting". Optional.
	Join api.TxnOps
	// Grant makes the ops the grant writes (see Acquire), at the moment of
	// the grant, so that a record they hold (a node's "replacing since")
	// tells the time of the grant. It may be called once per try of the
	// grant; the last call before a nil error made what was written.
	// Optional.
	Grant func() api.TxnOps
	// Check is asked right before each grant transaction, once the slot is
	// free and the gate's keys let the grant be tried: what the caller
	// holds the grant to that Consul cannot check in the transaction (a
	// Consul check's health), read as late as it can be. An error ends the
	// wait with that error, the contender out of line and nothing granted.
	// It is not asked when a grant whose reply was lost is adopted: it was
	// asked before that grant's transaction. Optional.
	Check func(ctx context.Context) error
	// Note goes into the node's claim (Claim.Note): what the step is for,
	// such as the SHA it moves to. Optional; at most MaxNote bytes.
	Note string
}

// MaxNote bounds Writes.Note, well inside the size of one key a bounded
// read of the slot takes (keyLimit), with the claim's other fields.
const MaxNote = 1 << 10

func checkNote(note string) error {
	if len(note) > MaxNote {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrNoteTooLong, len(note), MaxNote)
	}
	return nil
}

// AcquireWith is Acquire with w's writes. A *TxnError names an op of the
// caller's, counted within Join or within what Grant returned.
//
// A grant whose reply was lost, and that AcquireWith gives up on before it
// finds and adopts it (the gate closed, ctx ended), is released before it
// returns: the caller began no step under it, and left to the session, or
// to its claim's lease, it would keep a slot from everyone, and a claim
// that ran out would be reported as a node lost mid-step.
func (m *Semaphore) AcquireWith(ctx context.Context, g Gate, w Writes) (*Hold, error) {
	if err := g.validate(); err != nil {
		return nil, err
	}
	if err := checkNote(w.Note); err != nil {
		return nil, err
	}
	m.note, m.unsure = w.Note, false
	if w.Grant == nil {
		w.Grant = func() api.TxnOps { return nil }
	}
	j, err := m.enqueue(ctx, w.Join)
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go m.watchGate(wctx, cancel, g)
	go func() {
		select {
		case <-m.s.Done():
			cancel(ErrSessionLost)
		case <-wctx.Done():
		}
	}()
	h, err := m.waitTurn(wctx, g, w, j)
	if err != nil {
		m.dequeue()
		if m.unsure {
			m.giveBack(g)
		}
		return nil, err
	}
	return h, nil
}

// giveBack releases the slot that a grant whose reply was lost took, if
// it did: the caller got an error and no Hold, and the session, which may
// live as long as its process, must not keep the slot meanwhile. If
// Consul cannot say, the slot is freed when the session ends.
func (m *Semaphore) giveBack(g Gate) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, _, err := m.c.KV().Get(m.hkey, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		m.log.Warn("cannot tell whether a grant whose reply was lost took a slot; the next look of its node, or the end of its session, frees it", "error", err)
		return
	}
	m.mu.Lock()
	held := m.active != nil // then the key is that hold's, not the lost grant's
	m.mu.Unlock()
	if held || p == nil || p.Session != m.s.ID() {
		return
	}
	m.log.Info("giving back a slot granted with its reply lost")
	h := startHold(m, g, p.ModifyIndex)
	if err := h.Release(ctx); err != nil {
		h.Drop()
		m.log.Warn("could not give back a slot granted with its reply lost; the next look of its node, or the end of its session, frees it", "error", err)
	}
}

func (m *Semaphore) entry(state string) []byte {
	b, _ := json.Marshal(Entry{Name: m.opts.Name, State: state, Since: wallclock.Now().UTC(), Domain: m.opts.Domain})
	return b
}

// enqueue creates this contender's key, locked by the session, so that its
// CreateIndex fixes its place in line and its session's death removes it,
// and writes join with it. Consul errors are retried with backoff until ctx
// ends.
func (m *Semaphore) enqueue(ctx context.Context, join api.TxnOps) (joined, error) {
	r := m.retry()
	for {
		select {
		case <-m.s.Done():
			return joined{}, ErrSessionLost
		case <-ctx.Done():
			return joined{}, ctx.Err()
		default:
		}
		ok, j, err := m.lockContender(ctx, join)
		var te *TxnError
		switch {
		case errors.As(err, &te):
			return joined{}, err
		case err != nil && isInvalidSession(err):
			m.s.lost("consul no longer knows the session", err)
			return joined{}, ErrSessionLost
		case err != nil:
			r.wait(ctx, "enqueue", err)
		case !ok:
			m.s.lost("could not lock the contender key", nil)
			return joined{}, ErrSessionLost
		default:
			m.joined = j.index
			return j, nil
		}
	}
}

// joined is what the transaction that put this contender in line saw.
type joined struct {
	// pred is the contender that joined just before us, as the line's tail
	// named it, or nil when it could not be told: then the line is listed.
	pred *contender
	// holds says our holder key is locked by our session already.
	holds bool
	// index is the CreateIndex of our contender key, made by the join.
	index uint64
}

// Ops of the join transaction, before the caller's.
const (
	joinOpLock = 1 // after the delete that makes the key, and its place, new
	joinOps    = 5
)

// lockContender creates and locks our contender key, with join in the same
// transaction; ok is false when Consul refused the lock. The key is made
// anew, so that its CreateIndex is this join's even if an earlier one of
// ours was left behind. The transaction also swaps the line's tail record
// for our key and returns the one before: the contender that joined just
// before us, found without listing the line, which at the start of a
// rollout, with every node joining at once, would cost O(N) each.
func (m *Semaphore) lockContender(ctx context.Context, join api.TxnOps) (ok bool, j joined, err error) {
	tail := m.opts.Prefix + tailKey
	ops := append(api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVDelete, Key: m.key}},
		{KV: &api.KVTxnOp{Verb: api.KVLock, Key: m.key, Value: m.entry("waiting"), Session: m.s.ID()}},
		{KV: &api.KVTxnOp{Verb: api.KVGetTree, Key: tail}}, // no result when there is no tail yet
		{KV: &api.KVTxnOp{Verb: api.KVSet, Key: tail, Value: []byte(m.key)}},
		{KV: &api.KVTxnOp{Verb: api.KVGetTree, Key: m.hkey}},
	}, join...)
	ok, resp, _, err := m.c.Txn().Txn(ops, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return false, joined{}, err
	}
	if ok {
		return true, m.parseJoin(resp), nil
	}
	switch op, what := firstTxnError(resp); {
	case op < 0 || isDenied(what):
		return false, joined{}, &TxnError{Op: op, What: what}
	case op == joinOpLock:
		return false, joined{}, nil
	case op < joinOps:
		return false, joined{}, &TxnError{Op: -1, What: what}
	default:
		return false, joined{}, &TxnError{Op: op - joinOps, What: what}
	}
}

// parseJoin reads the join transaction's results: our key as made, the
// tail before our write to it (written at an earlier index than ours, by
// the join of the contender it names, so that index is that contender's
// CreateIndex), and our holder key if we lock it.
func (m *Semaphore) parseJoin(resp *api.TxnResponse) joined {
	var j joined
	for _, r := range resp.Results {
		if r.KV != nil && r.KV.Key == m.key {
			j.index = r.KV.CreateIndex
		}
	}
	mine := j.index
	for _, r := range resp.Results {
		kv := r.KV
		switch {
		case kv == nil:
		case kv.Key == m.hkey && kv.Session == m.s.ID():
			j.holds = true
		case kv.Key == m.opts.Prefix+tailKey && kv.ModifyIndex < mine && len(kv.Value) > 0:
			// A key of an older version, named by session alone, is a
			// waiter all the same: it keeps its place in line.
			pred := string(kv.Value)
			rest, ok := strings.CutPrefix(pred, m.opts.Prefix+contenderPrefix)
			if _, session, _, valid := splitEntry(rest); ok && valid && session != m.s.ID() {
				j.pred = &contender{Session: session, Key: pred, CreateIndex: kv.ModifyIndex, ModifyIndex: kv.ModifyIndex}
			}
		}
	}
	return j
}

// dequeue removes the contender key with a fresh context: it runs when the
// caller's own context may be done.
func (m *Semaphore) dequeue() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ops := api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVCheckSession, Key: m.key, Session: m.s.ID()}},
		{KV: &api.KVTxnOp{Verb: api.KVDelete, Key: m.key}},
	}
	if _, _, _, err := m.c.Txn().Txn(ops, (&api.QueryOptions{}).WithContext(ctx)); err != nil {
		m.log.Warn("could not leave the queue; the session's end will remove the key", "key", m.key, "error", err)
	}
}

// watchGate cancels ctx with the gate's error once DesiredKey moves off the
// gate's index. Writers that close the gate rewrite DesiredKey too, so this
// one watch covers a new commit, a CANCEL and a pause.
func (m *Semaphore) watchGate(ctx context.Context, cancel context.CancelCauseFunc, g Gate) {
	moved := m.watchKey(ctx, "watch gate", g.DesiredKey, g.DesiredIndex, func(p *api.KVPair, last uint64) (uint64, bool) {
		return last, p == nil || p.ModifyIndex != g.DesiredIndex
	})
	if moved {
		cancel(m.whyClosed(ctx, g))
	}
}

// gateError maps a failed gate check to its error. A CANCEL also moves
// desired, so a failed index check still has to look for closing keys.
func (m *Semaphore) gateError(ctx context.Context, g Gate, op int) error {
	if op == 0 {
		return m.whyClosed(ctx, g)
	}
	return g.gateError(op)
}

// whyClosed tells a CANCEL or pause from a new commit once desired moved.
func (m *Semaphore) whyClosed(ctx context.Context, g Gate) error {
	for _, k := range append(append([]string{}, g.Closed...), g.Brakes...) {
		p, _, err := m.c.KV().Get(k, (&api.QueryOptions{}).WithContext(ctx))
		if err == nil && p != nil {
			return &ClosedError{Key: k}
		}
	}
	return ErrSuperseded
}

func (m *Semaphore) blocking(ctx context.Context, index uint64) *api.QueryOptions {
	return (&api.QueryOptions{WaitIndex: index, WaitTime: m.opts.WaitTime}).WithContext(ctx)
}
