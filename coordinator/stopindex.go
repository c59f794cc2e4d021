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
// written its record without the mark. A key left behind costs readers
// one read of the record, never a wrong count. An error wrapping
// ErrACLDenied says the token may not write the index (an ACL policy from
// before it): such a writer leaves StopIndex off its records.
func (s *Store) ClearStopped(ctx context.Context, group, node string) error {
	k, err := s.Keys(group)
	if err != nil {
		return err
	}
	if _, err := s.c.KV().Delete(k.Stopped(node), (&api.WriteOptions{}).WithContext(ctx)); err != nil {
		return consulError(s.c, err)
	}
	return nil
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
