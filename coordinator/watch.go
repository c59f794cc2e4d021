package coordinator

import (
	"context"
	"time"

	"github.com/hashicorp/consul/api"
)

// Woken is the desired record as a wait on it (WaitDesired) saw it move,
// with the index Consul answered with: where an agent's next look starts
// (ReadForAt). The zero value holds nothing, and the look reads desired
// first.
type Woken struct {
	pair  *api.KVPair
	index uint64
}

// WaitDesired blocks, for at most wait, until group's desired record moves
// off seen (its ModifyIndex, 0 while nothing is committed): one blocking
// query from index, which is the index Consul last answered with, not seen:
// with nothing committed seen is 0, and a wait on index 0 returns at once.
// moved says whether desired moved, and w is then how it moved; last is the
// answer's index.
func (s *Store) WaitDesired(ctx context.Context, group string, seen, index uint64, wait time.Duration) (w Woken, moved bool, last uint64, err error) {
	k, err := s.Keys(group)
	if err != nil {
		return Woken{}, false, 0, err
	}
	p, meta, err := s.Get(ctx, k.Desired(), &api.QueryOptions{WaitIndex: index, WaitTime: wait})
	if err != nil {
		return Woken{}, false, 0, err
	}
	var cur uint64
	if p != nil {
		cur = p.ModifyIndex
	}
	if cur == seen {
		return Woken{}, false, meta.LastIndex, nil
	}
	// Desired gone: nothing in hand, and the look reads it again.
	if p == nil {
		return Woken{}, true, meta.LastIndex, nil
	}
	return Woken{pair: p, index: meta.LastIndex}, true, meta.LastIndex, nil
}

// DesiredIndex is the ModifyIndex of desired as read, 0 when nothing is
// committed: what a wait for it to move starts from.
func (g *GroupState) DesiredIndex() uint64 {
	if g.DesiredPair == nil {
		return 0
	}
	return g.DesiredPair.ModifyIndex
}
