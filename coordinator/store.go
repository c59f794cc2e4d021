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
	"github.com/rollagent/rollagent/hashspec"
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
		canaries: &canaryClocks{clocks: map[string]canarySight{}}}
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

// CommitResult says what Commit did.
type CommitResult struct {
	SHA            string
	Previous       string
	AlreadyDesired bool
	// Paused is the operator's pause of the group that holds the commit,
	// as read right after it; nil when none was there.
	Paused *OperatorPause
}

// Commit stores spec in history and makes it desired, with CAS on desired.
// A spec whose SHA is already desired writes nothing. A SHA that was
// cancelled is refused: a cancel holds until a new spec is committed.
func (s *Store) Commit(ctx context.Context, group string, spec *hashspec.Spec, author, reason string) (*CommitResult, error) {
	return s.commit(ctx, group, spec, author, reason, EventCommit)
}

// commit is Commit, logged as kind.
func (s *Store) commit(ctx context.Context, group string, spec *hashspec.Spec, author, reason string, kind EventKind) (*CommitResult, error) {
	k, err := s.Keys(group)
	if err != nil {
		return nil, err
	}
	canon, err := spec.Canonical()
	if err != nil {
		return nil, err
	}
	if err := hashspec.CheckCommitSize(canon); err != nil {
		return nil, fmt.Errorf("%w; nothing committed", err)
	}
	sha, err := spec.SHA()
	if err != nil {
		return nil, err
	}
	if err := s.checkAfter(ctx, group, spec.Update.After); err != nil {
		return nil, err
	}
	ev := Event{Kind: kind, By: author, SHA: sha, Reason: reason}
	canaries, err := s.canaryOps(ctx, k, group, sha, spec.Update, ev)
	if err != nil {
		return nil, err
	}
	for i := 0; i < casAttempts; i++ {
		res, conflict, err := s.commitOnce(ctx, k, group, canon, ev, canaries)
		if err == nil && !res.AlreadyDesired {
			s.prune(ctx, group, OperatorWriter())
		}
		if err == nil {
			res.Paused = s.operatorPaused(ctx, k)
		}
		if err == nil || !conflict {
			return res, err
		}
	}
	return nil, ErrConflict
}

func (s *Store) commitOnce(ctx context.Context, k Keys, group string, canon []byte, ev Event, canaries api.TxnOps) (*CommitResult, bool, error) {
	sha := ev.SHA
	if cancelled, err := s.cancelled(ctx, k, sha); err != nil {
		return nil, false, err
	} else if cancelled {
		return nil, false, fmt.Errorf("SHA %s of group %s was cancelled; change the spec to get a new SHA", ShortSHA(sha), group)
	}
	cur, pair, err := s.readDesired(ctx, k)
	if err != nil && pair == nil {
		return nil, false, err
	}
	res := &CommitResult{SHA: sha}
	var index uint64
	if pair != nil {
		index = pair.ModifyIndex
	}
	if cur != nil {
		if cur.SHA == sha {
			res.AlreadyDesired = true
			return res, false, nil
		}
		res.Previous = cur.SHA
	}
	now := wallclock.Now().UTC()
	d := Desired{SHA: sha, Previous: res.Previous, CommittedAt: now, Author: ev.By, Reason: ev.Reason}
	ops := append(append(desiredOps(k, index, d), operatorCommitOps(k, sha)...), canaries...)
	hist, err := s.historyOp(ctx, k, HistoryEntry{SHA: sha, Spec: canon, CommittedAt: now, Author: ev.By})
	if err != nil {
		return nil, false, err
	}
	if cur != nil {
		conv, err := s.convergedOps(ctx, k, group, pair, now)
		if err != nil {
			return nil, false, err
		}
		ops = append(ops, conv...)
	}
	ev.From, ev.At = res.Previous, now
	ops = append(append(ops, hist), eventOps(k, OperatorWriter(), ev)...)
	if _, conflict, err := s.txn(ctx, ops); err != nil {
		return nil, conflict, err
	}
	return res, false, nil
}

// operatorPaused reads the operator's pause of the group, for a commit to
// say what holds it; best effort, nil when none could be read.
func (s *Store) operatorPaused(ctx context.Context, k Keys) *OperatorPause {
	p, _, err := s.Get(ctx, k.OperatorPause(), nil)
	if err != nil || p == nil {
		return nil
	}
	var op OperatorPause
	if decode(p.Key, p.Value, &op) != nil {
		op = OperatorPause{Reason: "(unreadable pause record)"}
	}
	return &op
}

// historyOp writes h under history/<sha> in every commit and rollback,
// even when it is there already: that write is what an agent's token may
// not make (docs/examples/acl-policy.hcl), so such a token cannot commit
// or roll back, although it may write desired for failure_action. A
// record that is there and reads as the same spec is written back as it
// is, keeping the first commit's time and author, which moves nothing in
// Consul; one that does not is replaced. CAS-ed at the index read.
func (s *Store) historyOp(ctx context.Context, k Keys, h HistoryEntry) (*api.TxnOp, error) {
	p, _, err := s.Get(ctx, k.History(h.SHA), nil)
	if err != nil {
		return nil, err
	}
	var old HistoryEntry
	if p != nil && decode(p.Key, p.Value, &old) == nil && old.SHA == h.SHA {
		return historyRewrite(p)[0], nil
	}
	op := &api.KVTxnOp{Verb: api.KVCAS, Key: k.History(h.SHA), Value: mustJSON(h)}
	if p != nil {
		op.Index = p.ModifyIndex
	}
	return &api.TxnOp{KV: op}, nil
}

// desiredOps make d desired, CAS-ed on desired at index (0: only if there
// is none), for every writer of desired: commit, rollback, and an agent's
// failure_action=rollback. In the same transaction they delete d.SHA's
// failure pause, failure records and failure counter, which belong to an
// earlier rollout of it: a SHA committed again starts neither paused nor
// with failures already counted. A failure write for it in between fails
// its CAS on the counter and is counted again, in the new rollout.
//
// That d.SHA has no CANCEL (a cancel holds until a new spec is committed,
// and no rollback, by hand or automatic, brings its SHA back) is checked on
// the read the caller decided on: a CANCEL landing meanwhile moves desired,
// which fails the CAS. Only an operator's commit checks it in Consul too
// (operatorCommitOps): Consul takes that check for a write of brakes/,
// which an agent's token may not make.
func desiredOps(k Keys, index uint64, d Desired) api.TxnOps {
	return api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: k.Desired(), Value: mustJSON(d), Index: index}},
		{KV: &api.KVTxnOp{Verb: api.KVDelete, Key: k.Pause(d.SHA)}},
		{KV: &api.KVTxnOp{Verb: api.KVDeleteTree, Key: k.FailuresPrefix(d.SHA)}},
		{KV: &api.KVTxnOp{Verb: api.KVDelete, Key: k.FailCount(d.SHA)}},
	}
}

// operatorCommitOps are what a commit or rollback by an operator adds to
// desiredOps: check that sha has no CANCEL, here or where one was kept
// before brakes/, and lift a pause of sha alone kept from before the pause
// held the group, which belonged to an earlier rollout, as the failure
// pause did. An operator's pause of the group stays: only resume lifts it.
func operatorCommitOps(k Keys, sha string) api.TxnOps {
	return api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVCheckNotExists, Key: k.Cancel(sha)}},
		{KV: &api.KVTxnOp{Verb: api.KVCheckNotExists, Key: k.LegacyCancel(sha)}},
		{KV: &api.KVTxnOp{Verb: api.KVDelete, Key: k.LegacyOperatorPause(sha)}},
	}
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

// convergedOps record, in the commit that moves desired off it, that the
// desired SHA converged, if it did: every node that counts runs it,
// converged, the gate is open and no slot is in use (Summary.Done), read
// at desired's index as the commit read it (the commit's CAS on desired
// makes the two one moment). Only a commit sees the whole group: an agent
// reads its own records alone, at a cost that does not grow with the
// fleet. A catalog that cannot be read takes no node for gone, which may
// only leave a converged SHA unrecorded.
func (s *Store) convergedOps(ctx context.Context, k Keys, group string, desired *api.KVPair, now time.Time) (api.TxnOps, error) {
	gs, err := s.Read(ctx, group, nil)
	if errors.Is(err, ErrGateUnread) {
		// The record is optional: a group that cannot be read whole now
		// leaves the SHA unrecorded, and the operator's commit goes on.
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if gs.Desired == nil || gs.DesiredPair.ModifyIndex != desired.ModifyIndex {
		return nil, nil // moved since: the commit's CAS fails and reads again
	}
	gs.Registered, _ = s.Registered(ctx, group)
	sum := gs.Summary(now, DefaultLostAfter)
	if !sum.Done {
		return nil, nil
	}
	c := Converged{SHA: gs.Desired.SHA, At: now, Nodes: sum.Counted}
	return api.TxnOps{{KV: &api.KVTxnOp{Verb: api.KVSet, Key: k.Converged(c.SHA), Value: mustJSON(c)}}}, nil
}
