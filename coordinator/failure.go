package coordinator

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/wallclock"
	"github.com/rollagent/rollagent/lockstep"
)

// failureAttempts bounds RecordFailure's tries. A try fails its CAS only
// when another writer's transaction went through (another failure, a
// commit, a cancel, a `node rm` under a percentage of max_failures), so N failures recorded at once need at most N tries.
const failureAttempts = 64

// RecordFailure records node's failure to reach sha and applies the spec's
// failure_action in the same transaction, and returns the action taken.
//
// Every failure write CASes sha's failure counter (Keys.FailCount), so two
// failures recorded at once are counted one after the other, never both
// from the same read: of N concurrent failures, exactly the one whose count
// reaches max_failures pauses or rolls back. A node's failure counts once,
// however often it is written. The pause and the rollback are also CAS-ed
// on desired, so if desired moved meanwhile, the failure is counted again
// against what desired is now. After a CANCEL of sha, the failure is
// recorded and nothing else is done: the operator has taken over.
func (s *Store) RecordFailure(ctx context.Context, group, node, sha, msg string) (Action, error) {
	return s.RecordFailureBy(ctx, group, node, node, sha, msg)
}

// RecordFailureBy is RecordFailure written by the agent of node writer:
// the agent of another node reports a node lost while replacing. The
// events go in the writer's part of the log (Keys.NodeEvents), logged as
// by AgentBy(writer).
func (s *Store) RecordFailureBy(ctx context.Context, group, writer, node, sha, msg string) (Action, error) {
	return s.recordFailure(ctx, group, writer, Failure{Node: node, SHA: sha, Error: msg, At: s.clock().UTC()})
}

// LostOps are the ops that record that node never came back from the step
// its claim on a slot was for, as RecordFailureBy records a failure, with
// failure_action, reported by the agent of node writer: note is the
// claim's (ClaimNote), since its grant. They go into the transaction that
// marks the claim lost (lockstep's MarkLostWith), so that the failure is
// counted if and only if the claim is marked: never for a node that
// reclaimed its slot meanwhile, and never missed by a reporter that dies
// between two writes. They check what they were read at (desired, the
// SHA's failure count): one that fails is a conflict, to be read again.
// A claim for an earlier commit of the SHA that is desired again now (X,
// then Y, then X once more) is no failure of this rollout, nor is a note
// that names no SHA: then there are no ops, and ActionNone. The writer
// prunes its part of the log after the transaction (PruneNodeEvents).
func (s *Store) LostOps(ctx context.Context, group, writer, node, note string, since time.Time, msg string) (api.TxnOps, Action, error) {
	sha, committed := parseClaimNote(note)
	if !ValidSHA(sha) {
		return nil, ActionNone, nil
	}
	k, err := s.Keys(group)
	if err != nil {
		return nil, ActionNone, err
	}
	if err := hashspec.ValidateName(writer); err != nil {
		return nil, ActionNone, fmt.Errorf("writer: %w", err)
	}
	gs, err := s.Read(ctx, group, nil)
	if err != nil {
		return nil, ActionNone, err
	}
	if gs.earlierCommit(sha, committed, since) {
		return nil, ActionNone, nil
	}
	ops, action := gs.failureTxn(k, Failure{Node: node, SHA: sha, Error: msg, At: s.clock().UTC()}, writer)
	return ops, action, nil
}

// PruneNodeEvents deletes the oldest events of node's part of group's log
// beyond the store's limit, best effort: after a transaction of the node's
// agent that appended to it outside this Store (LostOps).
func (s *Store) PruneNodeEvents(ctx context.Context, group, node string) {
	s.prune(ctx, group, NodeWriter(node))
}

// ClaimNote is the note of a node's claim on a slot for a step toward d:
// its SHA and, exactly as desired holds it, the time of the commit that
// made it desired, which tells one commit of a SHA from a later one.
func ClaimNote(d *Desired) string {
	if d.CommittedAt.IsZero() {
		return d.SHA
	}
	return d.SHA + "@" + d.CommittedAt.Format(time.RFC3339Nano)
}

// parseClaimNote reads a ClaimNote; committed is zero in a note of an
// agent from before the commit's time was in it (a bare SHA).
func parseClaimNote(note string) (sha string, committed time.Time) {
	sha, at, ok := strings.Cut(note, "@")
	if ok {
		committed, _ = time.Parse(time.RFC3339Nano, at)
	}
	return sha, committed
}

// earlierCommit says whether a step toward sha, for the commit of it at
// committed (zero: unknown) and granted at since, belonged to an earlier
// commit of sha than the desired one. Without the commit's time, a grant
// before the desired record's commit time is taken for an earlier one,
// which is as exact as the granting host's clock.
func (g *GroupState) earlierCommit(sha string, committed, since time.Time) bool {
	if g.Desired == nil || g.Desired.SHA != sha || g.Desired.CommittedAt.IsZero() {
		return false
	}
	if !committed.IsZero() {
		return !committed.Equal(g.Desired.CommittedAt)
	}
	return !since.IsZero() && since.Before(g.Desired.CommittedAt)
}

// recordFailure records f as written by the agent of node writer.
func (s *Store) recordFailure(ctx context.Context, group, writer string, f Failure) (Action, error) {
	k, err := s.Keys(group)
	if err != nil {
		return ActionNone, err
	}
	if err := hashspec.ValidateName(writer); err != nil {
		return ActionNone, fmt.Errorf("writer: %w", err)
	}
	for range failureAttempts {
		gs, err := s.Read(ctx, group, nil)
		if err != nil {
			return ActionNone, err
		}
		ops, action := gs.failureTxn(k, f, writer)
		_, conflict, err := s.txn(ctx, ops)
		switch {
		case err == nil:
			s.prune(ctx, group, NodeWriter(writer))
			return action, nil
		case !conflict:
			return ActionNone, err
		}
	}
	return ActionNone, ErrConflict
}

// failureTxn is the transaction that records f against g, read at one
// index, and the action it applies. It logs the failure when it counts
// (a node's repeat does not), and the action, in the part of the log of
// node writer, whose agent writes them.
func (g *GroupState) failureTxn(k Keys, f Failure, writer string) (api.TxnOps, Action) {
	recorded := g.failuresOf(k, f.SHA, func(err error) bool { return err == nil })
	count := len(recorded)
	var evs []Event
	if !hasFailure(recorded, f.Node) {
		count++
		evs = append(evs, Event{Kind: EventFailure, At: f.At, SHA: f.SHA, Node: f.Node, Reason: f.Error})
	}
	ops := api.TxnOps{
		g.desiredCheckOp(k),
		g.failCountOp(k, f.SHA, count),
		{KV: &api.KVTxnOp{Verb: api.KVSet, Key: k.Failure(f.SHA, f.Node), Value: mustJSON(f)}},
	}
	ops = append(ops, g.failureMembershipCheck(k)...)
	action, more, ev := g.failureAction(k, f.SHA, count)
	if ev != nil {
		evs = append(evs, *ev)
	}
	for i := range evs {
		evs[i].By = AgentBy(writer)
	}
	ops = append(ops, more...)
	if len(evs) > 0 {
		ops = append(ops, eventOps(k, NodeWriter(writer), evs...)...)
	}
	return ops, action
}

// desiredCheckOp checks that desired is still as read, without touching
// it: the action was decided on it, no action included. A read that a
// Consul server answered from a state older than its log (just after a
// restart, say) fails it and is made again, rather than record a failure
// of the desired SHA as one of a SHA no longer desired.
func (g *GroupState) desiredCheckOp(k Keys) *api.TxnOp {
	if g.DesiredPair == nil {
		return &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCheckNotExists, Key: k.Desired()}}
	}
	return &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: k.Desired(), Index: g.DesiredPair.ModifyIndex}}
}

// failCountOp writes sha's counter, CAS-ed at the index read (or only if
// it is absent), which every failure write moves.
func (g *GroupState) failCountOp(k Keys, sha string, count int) *api.TxnOp {
	c := FailCount{SHA: sha, Failures: count, Writes: 1, At: wallclock.Now().UTC()}
	var index uint64
	if p := g.byKey[k.FailCount(sha)]; p != nil {
		index = p.ModifyIndex
		var old FailCount
		if decode(p.Key, p.Value, &old) == nil {
			c.Writes = old.Writes + 1
		}
	}
	return &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: k.FailCount(sha), Value: mustJSON(c), Index: index}}
}

func hasFailure(fs []Failure, node string) bool {
	for _, f := range fs {
		if f.Node == node {
			return true
		}
	}
	return false
}

// NoRollbackTarget ends the reason of a pause that failure_action=rollback
// took because no SHA was fit to roll back to.
// RollbackUnderPause says why a failure under an operator's pause paused
// where failure_action=rollback would have rolled back.
const RollbackUnderPause = "failure_action=rollback paused instead: the group is paused by an operator, who rolls back (`rollagent rollback`) or resumes"

const NoRollbackTarget = "failure_action=rollback paused instead: no other SHA in history ever converged on every node (and stayed free of a cancel, a pause and failures since)"

// failureAction decides what the count-th failure of sha does, and the ops
// that do it. Only a failure of the desired SHA, neither cancelled nor
// paused by failures already, acts: so the one failure that reaches
// max_failures acts, and those after it find the pause, or desired moved
// by the rollback. An operator's pause does not stop it, but turns a
// rollback into a failure pause: an agent may not write brakes/, so it
// could not carry the pause's copy that agents from before the group-wide
// pause read to the SHA it rolls back to; the operator, who holds the
// group, rolls back by hand (`rollagent rollback`) or resumes. A failure
// pause under the operator's stays after its resume.
// The event it returns, if any, logs the action.
func (g *GroupState) failureAction(k Keys, sha string, count int) (Action, api.TxnOps, *Event) {
	if g.Desired == nil || g.Desired.SHA != sha || g.Spec == nil || g.Cancel != nil || g.Pause != nil {
		return ActionNone, nil, nil
	}
	reached := fmt.Sprintf("%d failure(s) reached max_failures=%s", count, maxFailuresText(g))
	pause := func(reason string) (Action, api.TxnOps, *Event) {
		ops := g.pauseOps(k, count, reason)
		return ActionPause, ops, &Event{Kind: EventPause, At: wallclock.Now().UTC(), SHA: sha, Reason: reason}
	}
	switch OnFailure(g.Spec, count, g.NodeCount()) {
	case ActionPause:
		return pause(reached)
	case ActionRollback:
		if g.OperatorPause != nil {
			return pause(reached + "; " + RollbackUnderPause)
		}
		to := g.rollbackTarget(k, sha)
		if to == "" {
			return pause(reached + "; " + NoRollbackTarget)
		}
		d := Desired{SHA: to, Previous: sha, CommittedAt: wallclock.Now().UTC(), Author: "rollagent", AutoRollback: true,
			Reason: fmt.Sprintf("rollback to %s: %d failure(s) of %s reached max_failures", ShortSHA(to), count, ShortSHA(sha))}
		ev := &Event{Kind: EventAutoRollback, At: d.CommittedAt, SHA: to, From: sha, Reason: d.Reason}
		return ActionRollback, desiredOps(k, g.DesiredPair.ModifyIndex, d), ev
	}
	return ActionNone, nil, nil
}

// pauseOps write the pause record of the desired SHA and touch desired,
// which closes every open gate for it and wakes the waiters.
func (g *GroupState) pauseOps(k Keys, count int, reason string) api.TxnOps {
	sha := g.Desired.SHA
	p := Pause{SHA: sha, Failures: count, At: wallclock.Now().UTC(), Reason: reason}
	return lockstep.CloseOps(g.DesiredPair, k.Pause(sha), mustJSON(p))
}

// rollbackTarget is the SHA that failure_action=rollback of failing goes
// to, or "" when there is none: of the SHAs a commit found converged on
// every node (converged/), the one found so most recently, if it is not
// the failing one, its spec is in history, it has no CANCEL (no rollback
// brings one back), and no pause or failure of it was recorded since it
// converged (one that does not decode counts as recorded since). A SHA
// only ever desired, such as a tag typo whose pull failed on every node,
// which counts no failure, is never gone back to.
func (g *GroupState) rollbackTarget(k Keys, failing string) string {
	var to string
	var toIndex uint64
	for sha := range g.convergedSHA {
		p := g.byKey[k.Converged(sha)]
		if p == nil || sha == failing || !g.inHistory(sha) || g.cancelledSHA[sha] || g.troubledSince(k, sha, p.ModifyIndex) {
			continue
		}
		if to == "" || p.ModifyIndex > toIndex {
			to, toIndex = sha, p.ModifyIndex
		}
	}
	return to
}

// troubledSince says whether sha has a pause or a failure written after
// Consul's index, or one that does not decode. Both belong to its latest
// commit, which clears those of the one before. Consul's order, not the
// records' times: those are on the clocks of the hosts that wrote them (a
// failure on its agent's, the converged record on a committer's), and a
// failure written by an agent whose clock is behind would pass for one
// from before the SHA converged.
func (g *GroupState) troubledSince(k Keys, sha string, index uint64) bool {
	// An operator's pause stands until an operator lifts it, whenever it
	// was written: the agent's rollback, which may not lift it, passes over.
	if g.byKey[k.LegacyOperatorPause(sha)] != nil {
		return true
	}
	if !g.pausedSHA[sha] && !g.failedSHA[sha] {
		return false
	}
	troubled := false
	if p := g.byKey[k.Pause(sha)]; p != nil {
		var ps Pause
		troubled = decode(p.Key, p.Value, &ps) != nil || p.ModifyIndex > index
	}
	prefix := k.FailuresPrefix(sha)
	for key, p := range g.byKey {
		if strings.HasPrefix(key, prefix) {
			var f Failure
			troubled = troubled || decode(p.Key, p.Value, &f) != nil || p.ModifyIndex > index
		}
	}
	return troubled
}

func (g *GroupState) inHistory(sha string) bool {
	for i := range g.History {
		if g.History[i].SHA == sha {
			return true
		}
	}
	return false
}

// PutNode publishes a node's state: a plain put, or a transaction with
// the stop mark's index (NodeOps).
func (s *Store) PutNode(ctx context.Context, group string, n NodeState) error {
	ops, err := s.NodeOps(group, n)
	if err != nil {
		return err
	}
	if len(ops) > 1 {
		_, _, err := s.txn(ctx, ops)
		return err
	}
	_, err = s.c.KV().Put(&api.KVPair{Key: ops[0].KV.Key, Value: ops[0].KV.Value}, (&api.WriteOptions{}).WithContext(ctx))
	if err != nil {
		return consulError(s.c, err)
	}
	return nil
}

// NodeOp is the txn op that publishes a node's state, for use in a fence:
// its record alone, which must carry no stop mark that it indexes (NodeOps
// writes that).
func (s *Store) NodeOp(group string, n NodeState) (*api.TxnOp, error) {
	k, err := s.Keys(group)
	if err != nil {
		return nil, err
	}
	if err := n.check(); err != nil {
		return nil, err
	}
	return &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: k.Node(n.Node), Value: mustJSON(n)}}, nil
}
