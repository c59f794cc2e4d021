package coordinator

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/wallclock"
	"github.com/rollagent/rollagent/lockstep"
)

// CauseProgressDeadline is the Cause of a pause that a progress deadline
// made (update.progress_deadline), not failures.
const CauseProgressDeadline = "progress_deadline"

// Deadline is the value of deadline/<sha>: the progress deadline of the
// commit of sha at CommittedAt passed, and failure_action applied, once.
// One from an earlier commit of the same SHA (X, then Y, then X again)
// speaks for none: the commit after it measures its own.
type Deadline struct {
	SHA         string    `json:"sha"`
	CommittedAt time.Time `json:"committed_at"` // of the desired record it passed for
	Node        string    `json:"node"`         // whose agent saw it pass and wrote this
	At          time.Time `json:"at"`
	After       string    `json:"after"`  // the deadline, as the spec gives it ("10m0s")
	Action      string    `json:"action"` // failure_action as applied: pause, rollback or continue
	Reason      string    `json:"reason"`
}

// DeadlineReason is what a deadline that passed says, in its record, the
// pause it made and the event log.
func DeadlineReason(after time.Duration) string {
	return fmt.Sprintf("no node converged in %s (update.progress_deadline)", after)
}

// deadlineOf is the desired commit's deadline record as read: nil when
// there is none, or when the one there is an earlier commit's. One that
// does not decode counts, with a placeholder: it may be this commit's, and
// the deadline must not pass twice.
func (g *GroupState) deadlineOf(k Keys) *Deadline {
	if g.Desired == nil {
		return nil
	}
	p := g.byKey[k.Deadline(g.Desired.SHA)]
	if p == nil {
		return nil
	}
	var d Deadline
	err := decode(p.Key, p.Value, &d)
	if err == nil && d.SHA != g.Desired.SHA {
		err = fmt.Errorf("%s: names SHA %q", p.Key, d.SHA)
	}
	if !g.note(err) {
		return &Deadline{SHA: g.Desired.SHA, Reason: "(unreadable deadline record)"}
	}
	if !d.CommittedAt.Equal(g.Desired.CommittedAt) {
		return nil
	}
	return &d
}

// FireDeadline records that the progress deadline of the desired commit
// passed, seen by the agent of node writer, and applies failure_action in
// the same transaction: under "pause" the gate closes (GateDeadlinePassed)
// until `rollagent resume`; under "rollback" desired goes back as a
// failure reaching max_failures takes it; under "continue" the record and
// its event say so and the rollout goes on.
//
// It reads the group again and fires only if, as read, sha at committed is
// still desired with a progress deadline, the gate is open (the window, the
// checks the spec blocks on, the failure budget included), writer's node is
// not converged on it, and no record of this commit exists. The record is created at the index read (0: none; or
// the earlier commit's, which it replaces), desired is checked at its
// index and the gate's keys absent, as a grant does: of agents that fire
// at once exactly one wins, and a pause, cancel or commit racing it fails
// it. fired is false, with no error, when it did not fire.
func (s *Store) FireDeadline(ctx context.Context, group, writer, sha string, committed time.Time) (fired bool, action Action, err error) {
	k, err := s.Keys(group)
	if err != nil {
		return false, ActionNone, err
	}
	if err := hashspec.ValidateName(writer); err != nil {
		return false, ActionNone, fmt.Errorf("writer: %w", err)
	}
	g, err := s.Read(ctx, group, nil)
	if err != nil {
		return false, ActionNone, err
	}
	ops, action, ok := g.deadlineTxn(k, writer, sha, committed, GateInput{Group: g, Now: wallclock.Now(), Mono: time.Now()})
	if !ok {
		return false, ActionNone, nil
	}
	_, conflict, err := s.txn(ctx, ops)
	switch {
	case conflict:
		return false, ActionNone, nil
	case err != nil:
		return false, ActionNone, err
	}
	s.prune(ctx, group, NodeWriter(writer))
	return true, action, nil
}

// deadlineTxn is the transaction that fires the desired commit's progress
// deadline, as g was read, its gate judged at in, and the action it
// applies; ok is false when it is not to fire (see FireDeadline).
func (g *GroupState) deadlineTxn(k Keys, writer, sha string, committed time.Time, in GateInput) (api.TxnOps, Action, bool) {
	if g.Desired == nil || g.Desired.SHA != sha || !g.Desired.CommittedAt.Equal(committed) || g.Spec == nil ||
		g.Spec.Update.ProgressDeadline == 0 || g.Deadline != nil {
		return nil, ActionNone, false
	}
	if v := Evaluate(in); !v.Open {
		return nil, ActionNone, false
	}
	for _, n := range g.Nodes {
		if n.Node == writer && n.SHA == sha && n.State.Verified() {
			return nil, ActionNone, false // converged since its count began: not its to measure
		}
	}
	after := time.Duration(g.Spec.Update.ProgressDeadline)
	reason := DeadlineReason(after)
	at := in.Now.UTC()
	d := Deadline{SHA: sha, CommittedAt: committed, Node: writer, At: at, After: after.String(),
		Action: g.Spec.Update.FailureAction, Reason: reason}
	var index uint64
	if p := g.byKey[k.Deadline(sha)]; p != nil {
		index = p.ModifyIndex // an earlier commit's (deadlineOf)
	}
	ops := api.TxnOps{{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: k.Deadline(sha), Value: mustJSON(d), Index: index}}}
	for _, key := range k.Closing(sha) {
		ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCheckNotExists, Key: key}})
	}
	evs := []Event{{Kind: EventDeadline, At: at, SHA: sha, Reason: reason + "; failure_action=" + d.Action}}
	action, more, ev := g.deadlineAction(k, sha, reason)
	if more == nil {
		more = api.TxnOps{g.desiredCheckOp(k)}
	}
	if ev != nil {
		evs = append(evs, *ev)
	}
	for i := range evs {
		evs[i].By = AgentBy(writer)
	}
	ops = append(append(ops, more...), eventOps(k, NodeWriter(writer), evs...)...)
	return ops, action, true
}

// deadlineAction is what failure_action makes of a deadline that passed,
// as failureAction makes of the failure that reaches max_failures: the
// ops that do it (nil for none: the caller checks desired itself) and the
// event that logs it.
func (g *GroupState) deadlineAction(k Keys, sha, reason string) (Action, api.TxnOps, *Event) {
	pause := func(reason string) (Action, api.TxnOps, *Event) {
		p := Pause{SHA: sha, Failures: len(g.Failures), At: wallclock.Now().UTC(), Reason: reason, Cause: CauseProgressDeadline}
		ops := lockstep.CloseOps(g.DesiredPair, k.Pause(sha), mustJSON(p))
		return ActionPause, ops, &Event{Kind: EventPause, At: p.At, SHA: sha, Reason: reason}
	}
	switch g.Spec.Update.FailureAction {
	case hashspec.FailurePause:
		return pause(reason)
	case hashspec.FailureRollback:
		to := g.rollbackTarget(k, sha)
		if to == "" {
			return pause(reason + "; " + NoRollbackTarget)
		}
		d := Desired{SHA: to, Previous: sha, CommittedAt: wallclock.Now().UTC(), Author: "rollagent", AutoRollback: true,
			Reason: fmt.Sprintf("rollback to %s: %s of %s", ShortSHA(to), reason, ShortSHA(sha))}
		ev := &Event{Kind: EventAutoRollback, At: d.CommittedAt, SHA: to, From: sha, Reason: d.Reason}
		return ActionRollback, desiredOps(k, g.DesiredPair.ModifyIndex, d), ev
	}
	return ActionNone, nil, nil
}

func (d *Deadline) check() error { return checkSHA("sha", d.SHA, false) }

// ConvergedOn names the nodes of group whose records say they converged
// on sha (converged, or down since): what an agent measuring the progress
// deadline watches for a node that turns converged. One list of nodes/.
func (s *Store) ConvergedOn(ctx context.Context, group, sha string) ([]string, error) {
	k, err := s.Keys(group)
	if err != nil {
		return nil, err
	}
	recs, _, err := s.nodeRecords(ctx, k)
	if err != nil {
		return nil, err
	}
	var out []string
	for name, n := range recs {
		if n.SHA == sha && n.State.Verified() {
			out = append(out, name)
		}
	}
	return out, nil
}
