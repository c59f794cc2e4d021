package coordinator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/lockstep"
)

// readForAttempts bounds ReadFor's tries when desired moves between its
// two requests; after them it falls back to Read.
const readForAttempts = 3

// ReadFor reads what the agent of one node needs of its group: the desired
// record, the desired SHA's spec, its CANCEL, pause and failures, the slot's
// holders, and the node's own record. Its cost does not grow with the
// group, where Read lists the whole tree, every node's record and every
// spec ever committed: with a thousand nodes that is half a megabyte per
// agent per look, and every agent looks when a commit lands.
//
// The records come from one read-only transaction that also checks desired
// is still at the index first read, so they are one consistent snapshot.
func (s *Store) ReadFor(ctx context.Context, group, node string) (*GroupState, error) {
	return s.ReadForAt(ctx, group, node, Woken{})
}

// ReadForAt is ReadFor from desired as a wait on it saw it move (w): an
// agent that a blocking query on desired woke has it in hand, and reading
// it again would cost every agent of the fleet a request on each commit.
// The transaction still checks desired at its index, and if it moved since,
// it is read again. With nothing in hand, desired is read first, as
// ReadFor does. It reads with the records the health of the checks the
// desired spec blocks on, the node's own (update.block_on_node) on the
// Consul node of the agent the store's client talks to.
func (s *Store) ReadForAt(ctx context.Context, group, node string, w Woken) (*GroupState, error) {
	g, err := s.readFor(ctx, group, node, w)
	if err != nil {
		return nil, err
	}
	g.For = node
	if k, err := s.Keys(group); err == nil {
		s.withRelease(g, k)
		if err := s.withNodeKeys(ctx, g, k); err != nil {
			return nil, err
		}
		if err := s.readCanaries(ctx, g, k); err != nil {
			return nil, err
		}
		s.withCanaries(g, k)
	}
	return s.withOrder(ctx, s.withHealth(ctx, g, true), node), nil
}

// withNodeKeys counts the group's records for a look under a percentage,
// from a listing of their names made after the look's records were read:
// a node removed in between is counted, or not, but its removal moved
// Keys.Membership after the look read it, so a grant on this look fails.
func (s *Store) withNodeKeys(ctx context.Context, g *GroupState, k Keys) error {
	if !g.Percentages() || g.NodeKeys > 0 {
		return nil
	}
	n, err := s.countNodes(ctx, k)
	g.NodeKeys = n
	return err
}

// CountNodes is how many records the group has under nodes/, from a
// listing of their names: what a percentage of max_parallel is of.
func (s *Store) CountNodes(ctx context.Context, group string) (int, error) {
	k, err := s.Keys(group)
	if err != nil {
		return 0, err
	}
	return s.countNodes(ctx, k)
}

func (s *Store) countNodes(ctx context.Context, k Keys) (int, error) {
	names, _, err := s.c.KV().Keys(k.NodesPrefix(), "", (&api.QueryOptions{}).WithContext(withReadLimit(ctx, keyNamesLimit)))
	if err != nil {
		return 0, fmt.Errorf("count the nodes of %s: %w", k.NodesPrefix(), consulError(s.c, err))
	}
	return len(names), nil
}

// readFor reads ReadForAt's records.
func (s *Store) readFor(ctx context.Context, group, node string, w Woken) (*GroupState, error) {
	desired, index := w.pair, w.index
	k, err := s.Keys(group)
	if err != nil {
		return nil, err
	}
	if desired != nil && desired.Key != k.Desired() {
		return nil, fmt.Errorf("coordinator: ReadForAt of group %q given key %q", group, desired.Key)
	}
	for range readForAttempts {
		p, last := desired, index
		desired = nil // if it moved, the next try reads it
		if p == nil {
			var meta *api.QueryMeta
			if p, meta, err = s.Get(ctx, k.Desired(), nil); err != nil {
				return nil, err
			}
			last = meta.LastIndex
		}
		if p == nil {
			return Parse(k, group, nil, last), nil
		}
		var d Desired
		if decode(p.Key, p.Value, &d) != nil {
			return Parse(k, group, api.KVPairs{p}, last), nil
		}
		pairs, moved, problem, err := s.readDesiredRecords(ctx, k, p, d.SHA, node)
		if err != nil {
			return nil, err
		}
		if !moved {
			// The transaction's reads are filtered to what the token may
			// read, without a word: a spec missing from history may be one
			// it may not read.
			if !slices.ContainsFunc(pairs, func(p *api.KVPair) bool { return p.Key == k.History(d.SHA) }) {
				if err := s.probeDenied(ctx, k.History(d.SHA)); err != nil {
					return nil, err
				}
			}
			g := parse(k, group, append(pairs, p), last, problem == "")
			if problem != "" {
				g.Problems = append(g.Problems, problem)
			}
			return g, nil
		}
	}
	return s.readTree(ctx, group, nil)
}

// readDesiredRecords reads, in one transaction checked against desired's
// index, the records of sha and of node (lookKeys), and the slot's holders (the
// record, the slot keys and the holder keys). moved reports that desired
// moved since it was read; problem says what was left unread, or is "".
//
// Every node's token may write under its own slot/.holders/<node>/, and
// every node's under .slots/, so the answer is bounded (lookLimit, on a client made by NewClient): past it the look is
// made again with the holders record and the slot keys alone (the node's
// claim is in one of them; readRecordAndSlots), and the other keys under
// slot/.holders/ are named in the problem, from a listing of their names.
// No node can make every look download what it wrote there.
func (s *Store) readDesiredRecords(ctx context.Context, k Keys, desired *api.KVPair, sha, node string) (api.KVPairs, bool, string, error) {
	record := lockstep.HoldersKey(k.Slot())
	exact, trees := lookKeys(k, sha, node)
	ops := api.TxnOps{{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: desired.Key, Index: desired.ModifyIndex}}}
	for _, key := range append(exact, trees...) {
		// get-tree, not get: a get of an absent key fails the transaction.
		ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVGetTree, Key: key}})
	}
	withTree := append(slices.Clone(ops), &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVGetTree, Key: record}})
	resp, moved, err := s.txn(withReadLimit(ctx, lookLimit), withTree) // only op 0, the check of desired, can conflict
	problem := ""
	var tl *TooLargeError
	if errors.As(err, &tl) {
		slots := lockstep.SlotsPrefix(k.Slot())
		problem = s.holderKeysProblem(ctx, record)
		var slotsProblem string
		resp, moved, slotsProblem, err = s.readRecordAndSlots(ctx, ops, record, slots)
		if slotsProblem != "" {
			problem += "; " + slotsProblem
		}
		exact = append(exact, record)
		trees = append(trees, slots)
	} else {
		trees = append(trees, record)
	}
	switch {
	case moved:
		return nil, true, "", nil
	case err != nil:
		return nil, false, "", err
	}
	var pairs api.KVPairs
	for _, r := range resp.Results {
		kv := r.KV
		if kv == nil || kv.Key == desired.Key {
			continue
		}
		// A tree of nodes/n1 also holds nodes/n10: keep the keys asked for.
		keep := false
		for _, e := range exact {
			keep = keep || kv.Key == e
		}
		for _, t := range trees {
			keep = keep || strings.HasPrefix(kv.Key, t)
		}
		if keep {
			pairs = append(pairs, kv)
		}
	}
	return pairs, false, problem, nil
}

// readRecordAndSlots is a look's read when the keys under the holders
// record are over lookLimit: the record and the slot keys, without the
// holder keys a node's token may add under its own name. The slot keys
// are shared, not a node's, and hold the claims (lockstep/doc.go), so
// they are read even when the record is absent. Every node's token may
// write them too: past lookLimit the look reads the record alone, which
// keeps a copy of every claim that counted at its last write, and
// problem says so, rather than every look failing.
func (s *Store) readRecordAndSlots(ctx context.Context, ops api.TxnOps, record, slots string) (resp *api.TxnResponse, moved bool, problem string, err error) {
	get := &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVGet, Key: record}}
	tree := &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVGetTree, Key: slots}}
	for _, extra := range []api.TxnOps{{get, tree}, {get}} {
		resp, moved, err = s.txn(withReadLimit(ctx, lookLimit), append(slices.Clone(ops), extra...))
		if err != nil && !moved && failedOn(resp, len(ops)) {
			// A get of an absent key fails the transaction: no record.
			resp, moved, err = s.txn(withReadLimit(ctx, lookLimit), append(slices.Clone(ops), extra[1:]...))
		}
		var tl *TooLargeError
		if !errors.As(err, &tl) || len(extra) == 1 {
			return resp, moved, problem, err
		}
		problem = fmt.Sprintf("%s: the slot keys are over the %d bytes a look accepts (any node's token may write there); the look read the holders record without them, whose copies of the claims are as of its last write", slots, lookLimit)
	}
	return resp, moved, problem, err
}

// holderKeysProblem names the keys under the holders record's prefix, for
// a look that could not read them: from a bounded listing of their names.
func (s *Store) holderKeysProblem(ctx context.Context, record string) string {
	msg := fmt.Sprintf("%s/: the slot's holder keys are over the %d bytes a look accepts (a node's token may have written them); the look read the holders record and the slot keys without them", record, lookLimit)
	names, _, err := s.c.KV().Keys(record+"/", "", (&api.QueryOptions{}).WithContext(withReadLimit(ctx, keyNamesLimit)))
	if err != nil {
		return msg
	}
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = fmt.Sprintf("%.120q", n)
	}
	return fmt.Sprintf("%s; %d keys there: %s", msg, len(names), listed(quoted))
}

// failedOn says a transaction that failed did so on op i alone, as a get
// of an absent key does.
func failedOn(resp *api.TxnResponse, i int) bool {
	return resp != nil && len(resp.Errors) == 1 && resp.Errors[0].OpIndex == i
}
