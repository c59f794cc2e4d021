package coordinator

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/lockstep"
)

var (
	// ErrNoCanaries means the desired spec has no update.canary: there is
	// nothing to promote past.
	ErrNoCanaries = errors.New("the desired spec has no canaries (update.canary); nothing to promote")
	// ErrPromoteCancelled means the desired SHA has a CANCEL: a promotion
	// would move nothing now, and must not be waiting for a later commit
	// of it either (a commit deletes it anyway).
	ErrPromoteCancelled = errors.New("cancelled; a cancelled rollout is never promoted (commit a new spec)")
)

// PromoteResult says what Promote did.
type PromoteResult struct {
	SHA     string
	Already bool // promoted/<sha> was written already: nothing written
	// Paused is the operator's pause that still holds the group: the
	// promotion is recorded, and nothing moves before `rollagent resume`.
	Paused *OperatorPause
}

// PromoteBy promotes the desired SHA's rollout past its canaries, as by,
// for reason: it writes Keys.Promoted, which only an operator's token may
// write, and touches desired in the same transaction, which wakes the
// nodes that wait and, being CAS-ed at the index read, proves no CANCEL
// or commit landed since the read that found none (every writer of a
// brake moves desired). It refuses a cancelled SHA, checked again by
// Consul in the transaction. Under a pause it records the promotion: the
// pause, ahead of it in the gate, still holds every node.
func (s *Store) PromoteBy(ctx context.Context, group, reason, by string) (*PromoteResult, error) {
	k, err := s.Keys(group)
	if err != nil {
		return nil, err
	}
	for range casAttempts {
		st, err := s.readTree(ctx, group, nil)
		if err != nil {
			return nil, err
		}
		if st.Desired == nil {
			return nil, fmt.Errorf("group %s: %w", group, ErrNothingCommitted)
		}
		res := &PromoteResult{SHA: st.Desired.SHA, Paused: st.OperatorPause}
		switch {
		case st.Cancel != nil:
			return res, fmt.Errorf("%s of group %s is %w", ShortSHA(res.SHA), group, ErrPromoteCancelled)
		case st.Spec == nil:
			return res, fmt.Errorf("group %s: desired SHA %s has no valid spec in history", group, ShortSHA(res.SHA))
		case st.Spec.Update.Canary == 0:
			return res, fmt.Errorf("group %s: %w", group, ErrNoCanaries)
		case st.promotionRecorded:
			// Only the record: a rollout the automatic rollback's mark
			// promotes gets one still, as agents from before the mark
			// wait on it.
			res.Already = true
			return res, nil
		}
		rec := Promotion{SHA: res.SHA, Reason: reason, At: s.clock().UTC(), By: by}
		ops := append(lockstep.CloseOps(st.DesiredPair, k.Promoted(res.SHA), mustJSON(rec)),
			&api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCheckNotExists, Key: k.Cancel(res.SHA)}},
			&api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCheckNotExists, Key: k.LegacyCancel(res.SHA)}})
		ops = append(ops, eventOps(k, OperatorWriter(), Event{Kind: EventPromote, At: rec.At, By: by, SHA: res.SHA, Reason: reason})...)
		_, conflict, err := s.txn(ctx, ops)
		if err == nil {
			s.prune(ctx, group, OperatorWriter())
		}
		if err == nil || !conflict {
			return res, err
		}
	}
	return nil, ErrConflict
}
