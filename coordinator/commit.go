package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/wallclock"
)

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
	moved, err := s.legacyPauseOps(ctx, k, cur, sha)
	if err != nil {
		return nil, false, err
	}
	ops = append(ops, moved...)
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

// legacyPauseOps keep, under an operator's pause of the group, its copy at
// brakes/pause/<sha> on the SHA a commit makes desired: agents from before
// the pause held the group look for a pause there alone, for the desired
// SHA, and would take slots under it otherwise. The copy of the SHA
// desired before (cur) goes, so that no stale one pauses that SHA again
// after resume. The pause is checked at the index read, and with none
// checked absent: a pause or resume in between fails the commit, as it
// moves desired too.
func (s *Store) legacyPauseOps(ctx context.Context, k Keys, cur *Desired, sha string) (api.TxnOps, error) {
	p, _, err := s.Get(ctx, k.OperatorPause(), nil)
	if err != nil {
		return nil, err
	}
	if p == nil {
		return api.TxnOps{{KV: &api.KVTxnOp{Verb: api.KVCheckNotExists, Key: k.OperatorPause()}}}, nil
	}
	ops := api.TxnOps{{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: k.OperatorPause(), Index: p.ModifyIndex}}}
	if cur != nil && cur.SHA != sha {
		ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVDelete, Key: k.LegacyOperatorPause(cur.SHA)}})
	}
	return append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: k.LegacyOperatorPause(sha), Value: p.Value}}), nil
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
	sum := gs.Summary(now, s.lostAfter())
	if !sum.Done {
		return nil, nil
	}
	c := Converged{SHA: gs.Desired.SHA, At: now, Nodes: sum.Counted}
	return api.TxnOps{{KV: &api.KVTxnOp{Verb: api.KVSet, Key: k.Converged(c.SHA), Value: mustJSON(c)}}}, nil
}
