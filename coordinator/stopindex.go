package coordinator

import (
	"context"
	"errors"
	"time"

	"github.com/hashicorp/consul/api"
)

// NodeOps are the txn ops that publish a node's state: its record, and
// when the record carries a stop mark that its writer indexes (StopIndex),
// the mark's index key (Keys.Stopped), so that the two go together.
func (s *Store) NodeOps(group string, n NodeState) (api.TxnOps, error) {
	k, err := s.Keys(group)
	if err != nil {
		return nil, err
	}
	if err := n.check(); err != nil {
		return nil, err
	}
	ops := api.TxnOps{{KV: &api.KVTxnOp{Verb: api.KVSet, Key: k.Node(n.Node), Value: mustJSON(n)}}}
	if op := stopIndexOp(k, n); op != nil {
		ops = append(ops, op)
	}
	return ops, nil
}

// stopIndexOp is the op that sets n's stop index key, nil when n carries
// no mark or its writer keeps no index.
func stopIndexOp(k Keys, n NodeState) *api.TxnOp {
	if n.Stopped == nil || !n.StopIndex {
		return nil
	}
	return &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: k.Stopped(n.Node), Value: []byte(n.Stopped.UTC().Format(time.RFC3339Nano))}}
}

// ClearStopped deletes node's stop index key: its agent's, once it has
// written its record without the mark. Only while the record is as read
// without a mark (a check of its index in the delete's transaction): a
// delete sent before a later stop and applied after it (held by Consul,
// say through a leader election) would leave that stop's mark without its
// key, which Down then finds only on a full read. A record that carries a
// mark keeps the key, and the caller tries again later. A key left behind
// costs readers one read of the record, never a wrong count. An error
// wrapping ErrACLDenied says the token may not write the index (an ACL
// policy from before it): such a writer leaves StopIndex off its records.
func (s *Store) ClearStopped(ctx context.Context, group, node string) error {
	k, err := s.Keys(group)
	if err != nil {
		return err
	}
	pair, _, err := s.Get(ctx, k.Node(node), nil)
	if err != nil {
		return err
	}
	check := &api.KVTxnOp{Verb: api.KVCheckNotExists, Key: k.Node(node)}
	if pair != nil {
		var cur NodeState
		if decode(pair.Key, pair.Value, &cur) == nil && cur.Stopped != nil {
			return errors.New("the node's record carries a stop mark: its index key stays")
		}
		check = &api.KVTxnOp{Verb: api.KVCheckIndex, Key: pair.Key, Index: pair.ModifyIndex}
	}
	_, conflict, err := s.txn(ctx, api.TxnOps{{KV: check}, {KV: &api.KVTxnOp{Verb: api.KVDelete, Key: k.Stopped(node)}}})
	if conflict {
		return errors.New("the node's record changed while its stop index key was cleared: the key stays")
	}
	return err
}

// MayIndexStops says whether the token may write node's stop index key,
// without changing it: a transaction that deletes the key only if it does
// not exist. Consul vets every op's ACL before it applies any, so a token
// that may not write the key is refused (an error wrapping ErrACLDenied),
// and one that may is not, whether the key exists (the check fails and
// nothing is written) or not (nothing to delete).
func (s *Store) MayIndexStops(ctx context.Context, group, node string) error {
	k, err := s.Keys(group)
	if err != nil {
		return err
	}
	_, conflict, err := s.txn(ctx, api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVCheckNotExists, Key: k.Stopped(node)}},
		{KV: &api.KVTxnOp{Verb: api.KVDelete, Key: k.Stopped(node)}},
	})
	if conflict && !errors.Is(err, ErrACLDenied) {
		return nil // the key is there: the check failed, the token may write it
	}
	return err
}

// ErrStopIndexDenied is a stop mark that could not be written with its
// index because the token may not write the index: the caller writes the
// mark alone, with StopIndex off.
var ErrStopIndexDenied = errors.New("coordinator: the token may not write the stop index")
