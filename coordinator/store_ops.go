package coordinator

import (
	"context"
	"fmt"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/lockstep"
)

// Resume lifts the pause of the desired SHA, an operator's and the one its
// failures or its progress deadline made (the deadline's record stays:
// it does not pass again for the commit): it deletes both pause records, the failures counted
// towards the latter and their counter, and wakes every waiter. A CANCEL is
// not lifted: that takes a new commit.
func (s *Store) Resume(ctx context.Context, group string) (sha string, err error) {
	return s.ResumeBy(ctx, group, "")
}

// ResumeBy is Resume, logged as done by by.
func (s *Store) ResumeBy(ctx context.Context, group, by string) (sha string, err error) {
	k, err := s.Keys(group)
	if err != nil {
		return "", err
	}
	for i := 0; i < casAttempts; i++ {
		st, err := s.Read(ctx, group, nil)
		if err != nil {
			return "", err
		}
		if st.Desired == nil {
			return "", fmt.Errorf("group %s: %w", group, ErrNothingCommitted)
		}
		sha = st.Desired.SHA
		// A pause of the group is lifted under a CANCEL too: it would hold
		// the next commit, which is what lifts the CANCEL.
		if st.Cancel != nil && st.OperatorPause == nil {
			return sha, fmt.Errorf("%s of group %s is cancelled; a cancel is lifted only by committing a new spec", ShortSHA(sha), group)
		}
		if st.OperatorPause == nil && st.Pause == nil && len(st.Failures) == 0 {
			return sha, fmt.Errorf("%s of group %s is not paused", ShortSHA(sha), group)
		}
		ops := append(lockstep.TouchOps(st.DesiredPair),
			&api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVDelete, Key: k.OperatorPause()}},
			&api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVDelete, Key: k.LegacyOperatorPause(sha)}},
			&api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVDelete, Key: k.Pause(sha)}},
			&api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVDeleteTree, Key: k.FailuresPrefix(sha)}},
			&api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVDelete, Key: k.FailCount(sha)}})
		ops = append(ops, historyRewrite(st.byKey[k.History(sha)])...) // operator only: see historyRewriteOps
		ops = append(ops, eventOps(k, OperatorWriter(), Event{Kind: EventResume, By: by, SHA: sha, Reason: resumeReason(st)})...)
		_, conflict, err := s.txn(ctx, ops)
		if err == nil {
			s.prune(ctx, group, OperatorWriter())
		}
		if err == nil || !conflict {
			return sha, err
		}
	}
	return sha, ErrConflict
}

// resumeReason says what the resume lifts.
func resumeReason(g *GroupState) string {
	if p := g.OperatorPause; p != nil {
		return "lifted the " + p.Describe()
	}
	if g.Pause != nil && g.Pause.Cause == CauseProgressDeadline {
		return "lifted the pause as the progress deadline passed: " + g.Pause.Reason + "; it does not pass again for this commit"
	}
	if g.Pause != nil {
		return fmt.Sprintf("lifted the pause after %d failure(s): %s", g.Pause.Failures, g.Pause.Reason)
	}
	return fmt.Sprintf("cleared %d failure(s)", len(g.Failures))
}

// PauseBy pauses the group as an operator, by, for reason: nothing moves
// for it, whatever is committed meanwhile, until `rollagent resume`. The
// record is under brakes/, which an agent's token may not write, so no
// node can lift it; it touches desired, which closes every open gate and
// wakes the waiters. It returns the SHA desired, and already is true when
// the group was paused. A cancelled group may be paused: the pause then
// holds the next commit.
func (s *Store) PauseBy(ctx context.Context, group, reason, by string) (sha string, already bool, err error) {
	k, err := s.Keys(group)
	if err != nil {
		return "", false, err
	}
	for range casAttempts {
		st, err := s.Read(ctx, group, nil)
		if err != nil {
			return "", false, err
		}
		if st.Desired == nil {
			return "", false, fmt.Errorf("group %s: %w", group, ErrNothingCommitted)
		}
		sha = st.Desired.SHA
		if st.OperatorPause != nil {
			return sha, true, nil
		}
		rec := OperatorPause{SHA: sha, Reason: reason, At: s.clock().UTC(), By: by}
		ops := lockstep.CloseOps(st.DesiredPair, k.OperatorPause(), mustJSON(rec))
		ops = append(ops, eventOps(k, OperatorWriter(), Event{Kind: EventPause, At: rec.At, By: by, SHA: sha, Reason: reason})...)
		_, conflict, err := s.txn(ctx, ops)
		if err == nil {
			s.prune(ctx, group, OperatorWriter())
		}
		if err == nil || !conflict {
			return sha, false, err
		}
	}
	return sha, false, ErrConflict
}

// Rollback commits the spec of an earlier SHA again: to, or by default the
// one failure_action=rollback would choose, the latest SHA that converged
// on every node (rollbackTarget). The SHA desired before the current one
// is not a safe default: it may be a tag typo that never ran anywhere.
func (s *Store) Rollback(ctx context.Context, group, to, author string) (*CommitResult, error) {
	st, err := s.Read(ctx, group, nil)
	if err != nil {
		return nil, err
	}
	if to == "" {
		if to, err = st.defaultRollback(group); err != nil {
			return nil, err
		}
	}
	for i := range st.History {
		if h := &st.History[i]; h.SHA == to || (len(to) >= 7 && len(to) < len(h.SHA) && h.SHA[:len(to)] == to) {
			return s.commit(ctx, group, h.Decoded(), author, "rollback to "+ShortSHA(h.SHA), EventRollback)
		}
	}
	return nil, fmt.Errorf("SHA %s is not in the history of group %s", to, group)
}

// defaultRollback is the SHA a rollback with no --to goes to.
func (g *GroupState) defaultRollback(group string) (string, error) {
	if g.Desired == nil {
		return "", fmt.Errorf("group %s has nothing committed to roll back from", group)
	}
	if to := g.rollbackTarget(g.k, g.Desired.SHA); to != "" {
		return to, nil
	}
	return "", fmt.Errorf("group %s has no earlier SHA that converged on every node (and was not "+
		"cancelled, paused or failed since) to roll back to; name one with --to (rollagent history --shas lists them)", group)
}
