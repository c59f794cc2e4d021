package coordinator

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
)

// downInputs is what Down judges: Consul's failing checks, the removal
// marks, the stop index and the latest full read's mark, then the records
// it needs (all of them, or those of the nodes the rest names).
type downInputs struct {
	checks api.HealthChecks
	gone   map[string]bool // removal marks (Keys.Removed)
	index  []string        // nodes in the stop index (Keys.Stopped)
	mark   *DownCheckMark  // nil: none, or one that does not decode
	markAt uint64          // the mark's ModifyIndex, 0 when there is none
	// recs are the records read that decode, by node; kept names every
	// record read, one that does not decode included: such a node has a
	// record still, and a removal mark no longer speaks for it.
	recs map[string]*NodeState
	kept map[string]bool
}

// removed says n is out of the group: the operator removed it (`node rm`)
// and it has not written a record since, so what is left of it in the
// catalog (a dead agent's service) no longer counts it.
func (in *downInputs) removed(n string) bool { return !in.kept[n] && in.gone[n] }

// full says Down must read every record: a host is down, whose Consul
// node any record may name, or no full read vouches that every stop mark
// is in the index.
func (in *downInputs) full(now time.Time) bool {
	for _, c := range in.checks {
		if c.CheckID == "serfHealth" && c.Status == api.HealthCritical {
			return true
		}
	}
	return !in.mark.fresh(now)
}

// readDownInputs reads, at once, what Down judges before the records.
func (s *Store) readDownInputs(ctx context.Context, group string, k Keys) (downInputs, error) {
	var in downInputs
	var cerr, gerr, ierr, merr error
	var wg sync.WaitGroup
	wg.Go(func() { in.checks, cerr = s.failingChecks(ctx, group) })
	wg.Go(func() { in.gone, gerr = s.keyNames(ctx, k.RemovedPrefix()) })
	wg.Go(func() {
		var names map[string]bool
		names, ierr = s.keyNames(ctx, k.StoppedPrefix())
		for n := range names {
			in.index = append(in.index, n)
		}
	})
	wg.Go(func() { in.mark, in.markAt, merr = s.readDownCheck(ctx, k) })
	wg.Wait()
	return in, cmp.Or(cerr, gerr, ierr, merr)
}

// readAllRecords reads every record into in, and the failing checks again
// in every state (checksNotPassing), and marks the full read
// (Keys.DownCheck) for the readers after it.
func (s *Store) readAllRecords(ctx context.Context, k Keys, group string, in *downInputs) error {
	at := s.clock()
	var checks api.HealthChecks
	var cerr, err error
	var wg sync.WaitGroup
	wg.Go(func() { checks, cerr = s.checksNotPassing(ctx, group) })
	wg.Go(func() { in.recs, in.kept, err = s.nodeRecords(ctx, k) })
	wg.Wait()
	if err := cmp.Or(cerr, err); err != nil {
		return err
	}
	in.checks = checks
	s.markFullRead(ctx, k, in, at)
	return nil
}

// addRecords adds the records of pairs to in.
func (in *downInputs) addRecords(k Keys, pairs api.KVPairs) {
	for _, p := range pairs {
		name := strings.TrimPrefix(p.Key, k.NodesPrefix())
		in.kept[name] = true
		var n NodeState
		if decode(p.Key, p.Value, &n) == nil {
			in.recs[name] = &n
		}
	}
}

// readSomeRecords reads into in the records of the nodes that the failing
// checks of group's service and the stop index name, in transactions of
// reads (one, unless more than maxTxnOps nodes are named).
func (s *Store) readSomeRecords(ctx context.Context, k Keys, group string, in *downInputs) error {
	named := map[string]bool{}
	for _, n := range in.index {
		named[n] = true
	}
	for _, c := range in.checks {
		if n, ok := checkNode(group, c); ok {
			named[n] = true
		}
	}
	keys := make([]string, 0, len(named))
	for n := range named {
		keys = append(keys, k.Node(n))
	}
	slices.Sort(keys)
	in.recs, in.kept = make(map[string]*NodeState, len(keys)), make(map[string]bool, len(keys))
	for part := range slices.Chunk(keys, maxTxnOps) {
		pairs, err := s.getKeys(ctx, part)
		if err != nil {
			return err
		}
		in.addRecords(k, pairs)
	}
	return nil
}

// getKeys reads keys (at most maxTxnOps) in one transaction, and leaves
// out those that do not exist. Consul fails a transaction whose get finds
// no key, naming each such op: they are dropped and the rest read again,
// a few times at most, as keys may go between two tries. Not get-tree
// (readCanaries): the tree of nodes/n1 holds nodes/n10 to nodes/n199 too,
// a hundred records in a fleet of a thousand.
func (s *Store) getKeys(ctx context.Context, keys []string) (api.KVPairs, error) {
	for range 3 {
		ops := make(api.TxnOps, len(keys))
		for i, key := range keys {
			ops[i] = &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVGet, Key: key}}
		}
		if len(ops) == 0 {
			return nil, nil
		}
		ok, resp, _, err := s.c.Txn().Txn(ops, (&api.QueryOptions{}).WithContext(ctx))
		if err != nil {
			return nil, consulError(s.c, err)
		}
		if ok && len(resp.Results) < len(ops) {
			// Consul leaves out the result of a get the token may not
			// read, and says nothing: that record is not missing.
			return nil, fmt.Errorf("read the records Down needs: the token may not read every one of them, so Consul left some out (%w)", ErrACLDenied)
		}
		if ok {
			pairs := make(api.KVPairs, 0, len(resp.Results))
			for _, r := range resp.Results {
				if r.KV != nil {
					pairs = append(pairs, &api.KVPair{Key: r.KV.Key, Value: r.KV.Value, ModifyIndex: r.KV.ModifyIndex})
				}
			}
			return pairs, nil
		}
		missing := map[int]bool{}
		for _, e := range resp.Errors {
			switch {
			case isDenied(e.What):
				return nil, fmt.Errorf("read %s: %s (%w)", ops[e.OpIndex].KV.Key, e.What, ErrACLDenied)
			case !strings.Contains(e.What, "doesn't exist"):
				return nil, fmt.Errorf("read %s: %s", ops[e.OpIndex].KV.Key, e.What)
			}
			missing[e.OpIndex] = true
		}
		var left []string
		for i, key := range keys {
			if !missing[i] {
				left = append(left, key)
			}
		}
		keys = left
	}
	return nil, fmt.Errorf("read the records Down needs: keys kept going while read")
}

// failingChecks are the checks of group's service, of its nodes' alive
// instances (tagged with the group) and the serfHealth checks that are
// not passing: critical, or warning, which only a workload
// check says (not healthy now, and not yet down by a sustained signal).
//
// They are read by status, critical and warning at once, as Consul indexes
// checks by status: the server walks the checks that fail, where the state
// "any" walks every check of the datacenter (3,000-4,000 in a group of 1,000
// nodes, at each grant). Two reads are one view of the checks only when
// both answer at the same index of the checks table: otherwise a check
// that went from warning to critical between them could be in neither,
// and one read of every state is the view instead.
func (s *Store) failingChecks(ctx context.Context, group string) (api.HealthChecks, error) {
	filter := checksFilter(group)
	var crit, warn api.HealthChecks
	var cAt, wAt uint64
	var cerr, werr error
	var wg sync.WaitGroup
	wg.Go(func() { crit, cAt, cerr = s.checksIn(ctx, api.HealthCritical, filter) })
	wg.Go(func() { warn, wAt, werr = s.checksIn(ctx, api.HealthWarning, filter) })
	wg.Wait()
	if err := cmp.Or(cerr, werr); err != nil {
		return nil, err
	}
	if cAt == wAt {
		return append(crit, warn...), nil
	}
	return s.checksNotPassing(ctx, group)
}

// checksNotPassing are the checks failingChecks names, read in every state:
// also one whose status is none of Consul's three, which its agent API
// refuses but a catalog or txn write may set, and which no status's index
// holds. A full read of the records reads them so too.
func (s *Store) checksNotPassing(ctx context.Context, group string) (api.HealthChecks, error) {
	checks, _, err := s.checksIn(ctx, api.HealthAny, fmt.Sprintf(`(%s) and Status != "passing"`, checksFilter(group)))
	return checks, err
}

// checksFilter keeps the checks Down judges: of group's service, of its
// nodes' alive instances (tagged with the group), and serfHealth.
func checksFilter(group string) string {
	return fmt.Sprintf(`ServiceName == %q or (ServiceName == %q and %q in ServiceTags) or CheckID == "serfHealth"`,
		ServiceName(group), AliveServiceName, aliveGroupTag(group))
}

// checksIn are the checks in state that filter keeps, and the index of
// Consul's checks table they were read at.
func (s *Store) checksIn(ctx context.Context, state, filter string) (api.HealthChecks, uint64, error) {
	checks, meta, err := s.c.Health().State(state, (&api.QueryOptions{Filter: filter}).WithContext(ctx))
	if err != nil {
		return nil, 0, consulError(s.c, err)
	}
	if meta.ResultsFilteredByACLs {
		// Consul filters by ACL after the filter: what it left out is a
		// check Down counts, on a node or service the token may not read.
		return nil, 0, fmt.Errorf("read the failing checks: the token may not read every one of them (service:read and node:read), so Consul left some out (%w)", ErrACLDenied)
	}
	return checks, meta.LastIndex, nil
}

// keyNames are the names of the keys under prefix: the nodes with a
// removal mark (Keys.Removed), or in the stop index (Keys.Stopped).
func (s *Store) keyNames(ctx context.Context, prefix string) (map[string]bool, error) {
	pairs, _, err := s.list(ctx, prefix, nil)
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(pairs))
	for _, p := range pairs {
		out[strings.TrimPrefix(p.Key, prefix)] = true
	}
	return out, nil
}

// nodeRecords are group's node records that decode, by the name in their
// key, and the names of every record, one that does not decode included
// (kept): such a node has a record still, and a removal mark no longer
// speaks for it.
func (s *Store) nodeRecords(ctx context.Context, k Keys) (recs map[string]*NodeState, kept map[string]bool, err error) {
	pairs, _, err := s.list(ctx, k.NodesPrefix(), nil)
	if err != nil {
		return nil, nil, err
	}
	in := downInputs{recs: make(map[string]*NodeState, len(pairs)), kept: make(map[string]bool, len(pairs))}
	in.addRecords(k, pairs)
	return in.recs, in.kept, nil
}
