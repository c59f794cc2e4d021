package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"
)

// fullReadEvery is how long a full read of the records by Down
// (every record, O(N) bytes) that found every record keeping the stop
// index vouches for the index, for every reader of the group. It bounds
// how late a stop mark an older agent writes without the index is
// counted: short against what a rollout waits on (a replacement, a
// check's DownAfter), long against the grants of a large fleet, which then
// read every record once per this, not once per grant.
const fullReadEvery = 5 * time.Second

// downCheckSkew is how far in the future a full read's mark may be dated
// and still vouch: the writer's clock may run a little ahead of the
// reader's. A mark dated further is a clock gone wrong, not believed.
const downCheckSkew = time.Second

// stillSays says m is as good as a new mark that says all, at now: both
// say some record does not keep the index, which readers do not date, or
// both say all do and m is fresh for at least half of fullReadEvery
// more.
func (m *DownCheckMark) stillSays(all bool, now time.Time) bool {
	switch {
	case m == nil || m.AllIndexed != all:
		return false
	case !all:
		return true
	}
	return m.fresh(now) && now.Sub(m.At) < fullReadEvery/2
}

// DownCheckMark is the latest full read of a group's records by Down
// (Keys.DownCheck).
type DownCheckMark struct {
	// At is when the read began, by its reader's wall clock (UTC).
	At time.Time `json:"at"`
	// AllIndexed says every record it read keeps the stop index
	// (NodeState.StopIndex), every stop mark it read was in the index
	// as Down read it, and no failing check it read is in a status that
	// Consul's index of checks by status does not hold (unindexedStatus):
	// only then may readers skip reading them, and read the failing
	// checks by status.
	AllIndexed bool `json:"all_indexed"`
}

func (m *DownCheckMark) check() error {
	if m.At.IsZero() {
		return errors.New("no time")
	}
	return nil
}

// fresh says m vouches at now that every stop mark is in the index.
func (m *DownCheckMark) fresh(now time.Time) bool {
	return m != nil && m.AllIndexed && now.Sub(m.At) < fullReadEvery && m.At.Sub(now) <= downCheckSkew
}

// downChecks is what every copy of a Store shares of the marks of full
// reads: whether it writes them, whether the token may, and where to say
// it may not.
type downChecks struct {
	denied atomic.Bool
	log    atomic.Pointer[hclog.Logger] // nil: the store writes no mark
}

// WriteDownChecks makes the store write the mark of each of Down's full
// reads (Keys.DownCheck) for the readers after it, and say once to l if
// its token may not. Agents do, at the head of the line; a store that
// does not (the CLI: `status` writes nothing) still reads the mark.
func (s *Store) WriteDownChecks(l hclog.Logger) {
	if s != nil && s.downs != nil {
		s.downs.log.Store(&l)
	}
}

// readDownCheck reads the mark of the latest full read: nil when there is
// none or it does not decode (a full read is due), and its ModifyIndex.
func (s *Store) readDownCheck(ctx context.Context, k Keys) (*DownCheckMark, uint64, error) {
	p, _, err := s.Get(ctx, k.DownCheck(), nil)
	if err != nil || p == nil {
		return nil, 0, err
	}
	var m DownCheckMark
	if decode(p.Key, p.Value, &m) != nil {
		return nil, p.ModifyIndex, nil
	}
	return &m, p.ModifyIndex, nil
}

// markFullRead writes the mark of the full read in began at: whether every
// record it read keeps the stop index. Best effort: a mark not written
// only costs the next reader a full read. It is not written again while
// the one in KV says the same (stillSays), so that a fleet of older agents
// pays no write for it, and a fleet with a host down, which reads every
// record at every grant, one in every half of fullReadEvery; and it
// is written only over the mark in read (a CAS), so that of two readers at
// once, one writes.
func (s *Store) markFullRead(ctx context.Context, k Keys, in *downInputs, at time.Time) {
	// A record that does not decode is left out: Down counts no stop
	// mark in it, and whoever writes it again is judged by that record.
	// A mark whose index key was not there when Down read the index
	// (lost to a late delete, a restore of KV, or written since) does not
	// let the index vouch: only a full read finds it.
	indexed := make(map[string]bool, len(in.index))
	for _, n := range in.index {
		indexed[n] = true
	}
	all := !unindexedStatus(in.checks)
	for name, r := range in.recs {
		if !r.StopIndex || (r.Stopped != nil && !indexed[name]) {
			all = false
			break
		}
	}
	if s.downs == nil || s.downs.log.Load() == nil || s.downs.denied.Load() || in.mark.stillSays(all, at) {
		return
	}
	m := DownCheckMark{At: at.UTC(), AllIndexed: all}
	_, _, err := s.c.KV().CAS(&api.KVPair{Key: k.DownCheck(), Value: mustJSON(m), ModifyIndex: in.markAt},
		(&api.WriteOptions{}).WithContext(ctx))
	if err = consulErrorOrNil(s.c, err); errors.Is(err, ErrACLDenied) && !s.downs.denied.Swap(true) {
		if l := s.downs.log.Load(); l != nil {
			(*l).Warn(fmt.Sprintf("the token may not write %s, so every grant reads every node record; add it to the agents' ACL policy as docs/examples/acl-policy.hcl does", k.DownCheck()),
				"error", err)
		}
	}
}

// unindexedStatus says one of checks, all failing, is in a status other
// than critical and warning, which Down's reads by status do not find: a
// catalog or txn write may set any string, where the agent API refuses
// it. Until no full read finds one, every reader reads every record, and
// the checks in every state, at every Down.
func unindexedStatus(checks api.HealthChecks) bool {
	for _, c := range checks {
		if s := strings.ToLower(c.Status); s != api.HealthCritical && s != api.HealthWarning {
			return true
		}
	}
	return false
}
