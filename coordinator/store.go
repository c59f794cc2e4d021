package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/internal/wallclock"
	"github.com/rollagent/rollagent/lockstep"
)

// casAttempts bounds retries of a read-modify-write that lost a race.
const casAttempts = 5

var (
	// ErrNothingCommitted means the group has no desired key yet.
	ErrNothingCommitted = errors.New("nothing committed for this group")
	// ErrConflict means another writer changed desired while we worked.
	ErrConflict = errors.New("desired changed concurrently; look at status and try again")
	// ErrMaybeApplied means a write reached Consul but its answer was lost:
	// it may or may not have been applied, and only a read tells.
	ErrMaybeApplied = errors.New("the request reached Consul but its answer was lost; it may have been applied")
	// ErrAfterCycle means a spec's update.after would close a cycle of
	// groups that each wait for the next: none of them would ever move.
	ErrAfterCycle = errors.New("update.after makes a cycle of groups")
)

// Store reads and writes group state in Consul KV.
type Store struct {
	c      *api.Client
	prefix string
	addr   string // for errors; see SetAddress
	events int    // the event log's limit; 0 means DefaultEventLimit
	// limit bounds one listing of a group's tree; 0 means DefaultReadLimit.
	limit int64
	// now reads the wall clock of what this Store writes (wallclock.Now),
	// or a test's: a host whose clock is off.
	now func() time.Time
	// releases are the store's sights of each slot's releases, shared by
	// every copy of the store (update.stagger).
	releases *releaseClocks
	// canaries are the store's sights of healthy canaries
	// (update.auto_promote), shared by every copy of the store.
	canaries *canaryClocks
	// downs are the store's writes of Down's full reads (Keys.DownCheck),
	// shared by every copy of the store.
	downs *downChecks
	// lost is how long a node gone from Consul's catalog still counts
	// where the store counts nodes itself (see WithLostAfter). Optional,
	// defaults to DefaultLostAfter.
	lost time.Duration
}

func (s *Store) clock() time.Time {
	if s.now != nil {
		return s.now()
	}
	return wallclock.Now()
}

// NewStore returns a Store under prefix. Optional prefix, defaults to
// DefaultPrefix.
func NewStore(c *api.Client, prefix string) *Store {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return &Store{c: c, prefix: prefix, releases: &releaseClocks{clocks: map[string]*lockstep.ReleaseClock{}},
		canaries: &canaryClocks{clocks: map[string]canarySight{}}, downs: &downChecks{}}
}

// WithEventLimit returns a copy of the store that keeps at most n events
// in each writer's part of a group's log (n <= 0: DefaultEventLimit for
// the operators', DefaultNodeEventLimit for each node's).
func (s *Store) WithEventLimit(n int) *Store {
	c := *s
	c.events = n
	return &c
}

// WithReadLimit returns a copy of the store whose listing of a group's
// tree accepts at most n bytes before it reads the tree part by part
// (n <= 0: DefaultReadLimit). It bounds nothing on a client that NewClient
// did not make.
func (s *Store) WithReadLimit(n int64) *Store {
	c := *s
	c.limit = n
	return &c
}

// WithLostAfter returns a copy of the store that counts a node gone from
// Consul's catalog for d after its last sign, as status --lost-after does,
// wherever the store counts a group's nodes itself: the converged record a
// commit writes, update.after's progress and update.last's nodes behind
// (d <= 0: DefaultLostAfter).
func (s *Store) WithLostAfter(d time.Duration) *Store {
	c := *s
	c.lost = d
	return &c
}

func (s *Store) lostAfter() time.Duration {
	if s.lost <= 0 {
		return DefaultLostAfter
	}
	return s.lost
}

func (s *Store) readLimit() int64 {
	if s.limit <= 0 {
		return DefaultReadLimit
	}
	return s.limit
}

func (s *Store) eventLimit(w Writer) int {
	switch {
	case s.events > 0:
		return s.events
	case w.Kind == WriterNode:
		return DefaultNodeEventLimit
	}
	return DefaultEventLimit
}

// Keys returns the checked keys of group.
func (s *Store) Keys(group string) (Keys, error) { return NewKeys(s.prefix, group) }

// readDesired returns the desired record and its KV pair, or nil, nil when
// nothing is committed.
func (s *Store) readDesired(ctx context.Context, k Keys) (*Desired, *api.KVPair, error) {
	p, _, err := s.Get(ctx, k.Desired(), nil)
	if err != nil {
		return nil, nil, err
	}
	if p == nil {
		return nil, nil, nil
	}
	var d Desired
	if err := decode(p.Key, p.Value, &d); err != nil {
		return nil, p, err
	}
	return &d, p, nil
}

func (s *Store) exists(ctx context.Context, key string) (bool, error) {
	p, _, err := s.Get(ctx, key, nil)
	if err != nil {
		return false, err
	}
	return p != nil, nil
}

// txn runs ops and turns a rolled-back transaction into an error that says
// which op failed; conflict reports whether it failed on a CAS or index
// check, which the caller may retry.
func (s *Store) txn(ctx context.Context, ops api.TxnOps) (resp *api.TxnResponse, conflict bool, err error) {
	ok, resp, _, err := s.c.Txn().Txn(ops, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, false, consulError(s.c, err)
	}
	if ok {
		return resp, false, nil
	}
	var msgs []string
	hint := ""
	for _, e := range resp.Errors {
		op := ops[e.OpIndex].KV
		if op != nil && (op.Verb == api.KVCAS || op.Verb == api.KVCheckIndex || op.Verb == api.KVCheckNotExists) && !isDenied(e.What) {
			conflict = true
		}
		if op != nil && isDenied(e.What) && strings.Contains(op.Key, "/history/") {
			hint = " (every commit, rollback, resume and cancel writes history/, which only an operator's token may: an agent's token may not take them; see docs/examples/acl-operator.hcl)"
		}
		msgs = append(msgs, e.What)
	}
	msgs = shortenDenied(msgs)
	if hint != "" {
		msgs = append(msgs[:len(msgs)-1], msgs[len(msgs)-1]+hint)
	}
	if slices.ContainsFunc(msgs, isDenied) {
		return resp, false, fmt.Errorf("consul rejected the transaction: %s (%w)", strings.Join(msgs, "; "), ErrACLDenied)
	}
	return resp, conflict, fmt.Errorf("consul rejected the transaction: %s", strings.Join(msgs, "; "))
}

// shortenDenied keeps the first of the permission denials in msgs and
// counts the others: Consul names the token and a key in each, and a
// command's transaction writes a dozen keys, which would bury the message.
func shortenDenied(msgs []string) []string {
	var out []string
	denied := 0
	for _, m := range msgs {
		if isDenied(m) {
			denied++
			if denied > 1 {
				continue
			}
		}
		out = append(out, m)
	}
	if denied > 1 {
		out = append(out, fmt.Sprintf("and %d more keys the token may not write", denied-1))
	}
	return out
}

// mustJSON indents, since these values are read by people in the Consul
// UI's Key/Value page as much as by agents; the bytes cost is small.
func mustJSON(v any) []byte {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		panic(fmt.Sprintf("coordinator: marshal %T: %v", v, err)) // our own record types always marshal
	}
	return b
}

// cancelled says whether sha has a CANCEL, here or where one was kept
// before brakes/.
func (s *Store) cancelled(ctx context.Context, k Keys, sha string) (bool, error) {
	for _, key := range []string{k.Cancel(sha), k.LegacyCancel(sha)} {
		if ok, err := s.exists(ctx, key); err != nil || ok {
			return ok, err
		}
	}
	return false, nil
}

// historyRewriteOps write sha's history record back as it is, for an
// operator's action that an agent's token must not take although it may
// write every key the action changes: resume deletes pause/, failures/
// and failcount/ and touches desired, all of which agents write. Only
// history/ tells an operator's token from an agent's there. A cancel,
// whose record is under brakes/, which agents may not write, writes it
// too, so that an agent's token is refused by the CLI the same way.
// Consul does not move a key written with the value it has.
func (s *Store) historyRewriteOps(ctx context.Context, k Keys, sha string) (api.TxnOps, error) {
	p, _, err := s.Get(ctx, k.History(sha), nil)
	if err != nil {
		return nil, err
	}
	return historyRewrite(p), nil
}

// historyRewrite is the op of historyRewriteOps for the pair read, none
// when there is none.
func historyRewrite(p *api.KVPair) api.TxnOps {
	if p == nil {
		return nil
	}
	return api.TxnOps{{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: p.Key, Value: p.Value, Index: p.ModifyIndex}}}
}

// CancelResult says what Cancel did.
type CancelResult struct {
	SHA              string
	AlreadyCancelled bool
	// Desired is the desired SHA as read, when it is not SHA: the SHA
	// asked for was cancelled before desired moved on.
	Desired string
}

// Cancel persists a CANCEL for the desired SHA (which must equal sha when
// sha is given) and wakes every waiter, in one transaction. An error after
// desired was read comes with the result's SHA, the one it meant to cancel,
// so that a caller trying again can pin it.
func (s *Store) Cancel(ctx context.Context, group, sha, reason, by string) (*CancelResult, error) {
	k, err := s.Keys(group)
	if err != nil {
		return nil, err
	}
	for i := 0; i < casAttempts; i++ {
		cur, pair, err := s.readDesired(ctx, k)
		if err != nil {
			return nil, err
		}
		if cur == nil {
			return nil, fmt.Errorf("group %s: %w", group, ErrNothingCommitted)
		}
		if sha != "" && sha != cur.SHA {
			// A try whose answer was lost may have cancelled sha before
			// desired moved on: that CANCEL stands.
			if done, err := s.cancelled(ctx, k, sha); err != nil || done {
				return &CancelResult{SHA: sha, AlreadyCancelled: done, Desired: cur.SHA}, err
			}
			return nil, fmt.Errorf("SHA %s is not the desired SHA of group %s (desired is %s); nothing cancelled", ShortSHA(sha), group, ShortSHA(cur.SHA))
		}
		if done, err := s.cancelled(ctx, k, cur.SHA); err != nil || done {
			return &CancelResult{SHA: cur.SHA, AlreadyCancelled: done}, err
		}
		hist, err := s.historyRewriteOps(ctx, k, cur.SHA)
		if err != nil {
			return &CancelResult{SHA: cur.SHA}, err
		}
		rec := Cancel{SHA: cur.SHA, Reason: reason, At: s.clock().UTC(), By: by}
		ops := append(lockstep.CloseOps(pair, k.Cancel(cur.SHA), mustJSON(rec)), hist...)
		// A copy where agents from before brakes/ look for a CANCEL, and
		// check it in their grants and fences: a group whose agents are
		// upgraded one by one stops for all of them.
		ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: k.LegacyCancel(cur.SHA), Value: mustJSON(rec)}})
		ops = append(ops, eventOps(k, OperatorWriter(), Event{Kind: EventCancel, At: rec.At, By: by, SHA: cur.SHA, Reason: reason})...)
		_, conflict, err := s.txn(ctx, ops)
		if err == nil {
			s.prune(ctx, group, OperatorWriter())
			return &CancelResult{SHA: cur.SHA}, nil
		}
		if !conflict && maybeApplied(err) {
			return &CancelResult{SHA: cur.SHA}, fmt.Errorf("%w: %w", ErrMaybeApplied, err)
		}
		if !conflict {
			return &CancelResult{SHA: cur.SHA}, err
		}
	}
	return nil, ErrConflict
}

// maybeApplied says whether a write that failed with err may still have
// been applied: it reached Consul (anything but a refused or failed
// connection) and no answer says it was not. Consul can apply a write and
// still answer 500: a client agent whose forward to the servers broke, a
// leader lost while committing.
func maybeApplied(err error) bool {
	var u *UnreachableError
	var sc api.StatusError
	switch {
	case !IsTransient(err) || errors.Is(err, ErrConflict):
		return false
	case errors.As(err, &u):
		return u.Sent
	case errors.As(err, &sc):
		return sc.Code != 429 // turned away before anything was done
	}
	return true
}

// ShortSHA is the 12-character form of a SHA that people read in logs,
// tags and tables.
func ShortSHA(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}
