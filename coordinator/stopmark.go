package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/consul/api"
)

// MarkStopped sets Stopped on node's record, as a clean stop of its agent,
// only while the record is still the one the agent published last (same
// SHA, desired, state and error as expect), with a CAS on the record as
// read. A record that is gone (removed by node rm), newer (a release whose
// answer was lost), or another process's under the same name is left as it
// is: marked reports whether the mark was written. With expect.StopIndex,
// the mark's index key (Keys.Stopped) is set in the same transaction; if
// the token may not write it, the mark is written alone, with StopIndex
// off, and err wraps ErrStopIndexDenied although marked.
func (s *Store) MarkStopped(ctx context.Context, group string, expect NodeState, at time.Time) (marked bool, err error) {
	k, err := s.Keys(group)
	if err != nil {
		return false, err
	}
	pair, _, err := s.Get(ctx, k.Node(expect.Node), nil)
	if err != nil || pair == nil {
		return false, err
	}
	var cur NodeState
	if decode(pair.Key, pair.Value, &cur) != nil || !SamePublished(cur, expect) {
		return false, nil
	}
	at = at.UTC()
	cur.Stopped, cur.StopIndex = &at, expect.StopIndex
	marked, err = s.casMark(ctx, k, pair, cur)
	if cur.StopIndex && errors.Is(err, ErrACLDenied) {
		cur.StopIndex = false
		if marked, err = s.casMark(ctx, k, pair, cur); err == nil {
			err = fmt.Errorf("%w: the stop mark is written without it", ErrStopIndexDenied)
		}
	}
	return marked, err
}

// casMark writes cur, the record of pair with its stop mark, and the
// mark's index if cur keeps it, only if the record is still as read.
func (s *Store) casMark(ctx context.Context, k Keys, pair *api.KVPair, cur NodeState) (bool, error) {
	ops := api.TxnOps{{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: pair.Key, Value: mustJSON(cur), Index: pair.ModifyIndex}}}
	if op := stopIndexOp(k, cur); op != nil {
		ops = append(ops, op)
	}
	_, conflict, err := s.txn(ctx, ops)
	if conflict {
		return false, nil
	}
	return err == nil, err
}

// SamePublished says whether a and b say the same of a node, whatever
// their times.
func SamePublished(a, b NodeState) bool {
	return a.Node == b.Node && a.SHA == b.SHA && a.Desired == b.Desired && a.State == b.State && a.Error == b.Error &&
		a.ConsulNode == b.ConsulNode && a.Domain == b.Domain && a.Fenced == b.Fenced && a.ImageID == b.ImageID && a.Gate == b.Gate &&
		a.Drained.Equal(b.Drained) && sameSeen(a.Blocked, b.Blocked)
}
