package coordinator

import (
	"context"
	"time"

	"github.com/hashicorp/consul/api"
)

// MarkStopped sets Stopped on node's record, as a clean stop of its agent,
// only while the record is still the one the agent published last (same
// SHA, desired, state and error as expect), with a CAS on the record as
// read. A record that is gone (removed by node rm), newer (a release whose
// answer was lost), or another process's under the same name is left as it
// is: marked reports whether the mark was written.
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
	cur.Stopped = &at
	ok, _, err := s.c.KV().CAS(&api.KVPair{Key: pair.Key, Value: mustJSON(cur), ModifyIndex: pair.ModifyIndex},
		(&api.WriteOptions{}).WithContext(ctx))
	if err != nil {
		return false, consulError(s.c, err)
	}
	return ok, nil
}

// SamePublished says whether a and b say the same of a node, whatever
// their times.
func SamePublished(a, b NodeState) bool {
	return a.Node == b.Node && a.SHA == b.SHA && a.Desired == b.Desired && a.State == b.State && a.Error == b.Error &&
		a.ConsulNode == b.ConsulNode && a.Domain == b.Domain && a.Fenced == b.Fenced && a.ImageID == b.ImageID && a.Gate == b.Gate &&
		a.Drained.Equal(b.Drained)
}
