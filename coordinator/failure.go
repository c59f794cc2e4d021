package coordinator

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/lockstep"
)

// RecordFailure records node's failure to reach sha and applies the spec's
// failure_action in the same transaction: at max_failures, pause closes the
// gate for sha, and rollback makes the previous SHA desired. It returns the
// action taken. The pause and the rollback are CAS-ed on desired, so if
// desired moved meanwhile, only the failure is recorded.
func (s *Store) RecordFailure(ctx context.Context, group, node, sha, msg string) (Action, error) {
	k, err := s.Keys(group)
	if err != nil {
		return ActionNone, err
	}
	f := Failure{Node: node, SHA: sha, Error: msg, At: time.Now().UTC()}
	record := &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: k.Failure(sha, node), Value: mustJSON(f)}}
	for i := 0; i < casAttempts; i++ {
		gs, err := s.Read(ctx, group, nil)
		if err != nil {
			return ActionNone, err
		}
		if gs.Desired == nil || gs.Desired.SHA != sha || gs.Spec == nil {
			_, _, err := s.txn(ctx, api.TxnOps{record})
			return ActionNone, err
		}
		count := len(gs.Failures)
		if !hasFailure(gs.Failures, node) {
			count++
		}
		action := OnFailure(gs.Spec, count)
		ops := append(s.failureOps(k, gs, action, count), record)
		_, conflict, err := s.txn(ctx, ops)
		if err == nil || !conflict {
			return action, err
		}
	}
	return ActionNone, ErrConflict
}

func hasFailure(fs []Failure, node string) bool {
	for _, f := range fs {
		if f.Node == node {
			return true
		}
	}
	return false
}

func (s *Store) failureOps(k Keys, gs *GroupState, action Action, count int) api.TxnOps {
	sha := gs.Desired.SHA
	switch {
	case action == ActionPause && gs.Pause == nil:
		p := Pause{SHA: sha, Failures: count, At: time.Now().UTC(),
			Reason: fmt.Sprintf("%d failure(s) reached max_failures=%d", count, gs.Spec.Update.MaxFailures)}
		return lockstep.CloseOps(gs.DesiredPair, k.Pause(sha), mustJSON(p))
	case action == ActionRollback && gs.Desired.Previous != "":
		d := Desired{SHA: gs.Desired.Previous, Previous: sha, CommittedAt: time.Now().UTC(), Author: "rollagent",
			Reason: fmt.Sprintf("rollback: %d failure(s) of %s reached max_failures", count, ShortSHA(sha))}
		return api.TxnOps{{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: k.Desired(), Value: mustJSON(d), Index: gs.DesiredPair.ModifyIndex}}}
	}
	return nil
}

// PutNode publishes a node's state.
func (s *Store) PutNode(ctx context.Context, group string, n NodeState) error {
	op, err := s.NodeOp(group, n)
	if err != nil {
		return err
	}
	_, err = s.c.KV().Put(&api.KVPair{Key: op.KV.Key, Value: op.KV.Value}, (&api.WriteOptions{}).WithContext(ctx))
	if err != nil {
		return consulError(s.c, err)
	}
	return nil
}

// NodeOp is the txn op that publishes a node's state, for use in a fence.
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
