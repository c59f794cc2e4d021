package coordinator

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/hashspec"
)

// Canaries is the record of the nodes that take a SHA first
// (update.canary), chosen and written by the commit that makes it desired.
type Canaries struct {
	SHA string `json:"sha"`
	// Nodes are the canaries, in the order they were chosen; empty when
	// no node counted at the commit (a first deploy), which leaves no
	// canary stage: nothing ran an older SHA to protect.
	Nodes []string  `json:"nodes"`
	At    time.Time `json:"at"`
}

func (c *Canaries) check() error {
	if err := checkSHA("sha", c.SHA, false); err != nil {
		return err
	}
	for _, n := range c.Nodes {
		if err := hashspec.ValidateName(n); err != nil {
			return fmt.Errorf("nodes: %w", err)
		}
	}
	return nil
}

// Has says whether node is one of the canaries.
func (c *Canaries) Has(node string) bool { return c != nil && slices.Contains(c.Nodes, node) }

// Promotion is an operator's promotion of a SHA past its canaries
// (`rollagent promote`).
type Promotion struct {
	SHA    string    `json:"sha"`
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
	By     string    `json:"by,omitempty"`
}

func (p *Promotion) check() error { return checkSHA("sha", p.SHA, false) }

// ChooseCanaries picks n of nodes as the canaries of sha by rendezvous
// hashing: each node ranks by a hash of (sha, node), and the n lowest go
// first. The choice depends on nothing but the SHA and the set, so every
// reader would make it again; a node joining or leaving moves at most one
// pick, and a new SHA picks other nodes, so no one node is always the
// first to take a change. Nodes may be in any order and repeat.
//
// With update.max_parallel_per, ChooseCanariesIn spreads them over its
// domains.
func ChooseCanaries(sha string, nodes []string, n int) []string {
	return ChooseCanariesIn(sha, nodes, n, nil)
}

// ChooseCanariesIn is ChooseCanaries spread over topology domains (node ->
// domain, update.max_parallel_per's key): the lowest-ranked node of each
// domain in turn, domains in the order of their lowest-ranked node, then
// the second of each, so that N canaries cover min(N, domains) domains. A
// node with no domain ("" or absent) is a domain of its own, as for the
// spread; with no domains at all it is ChooseCanaries' order.
func ChooseCanariesIn(sha string, nodes []string, n int, domains map[string]string) []string {
	ranked := rankCanaries(sha, nodes)
	var order []string // domains, by their lowest-ranked node
	byDomain := map[string][]string{}
	for _, node := range ranked {
		d := domains[node]
		if d == "" {
			d = "\x00" + node // a domain of its own, never a real one's name
		}
		if _, ok := byDomain[d]; !ok {
			order = append(order, d)
		}
		byDomain[d] = append(byDomain[d], node)
	}
	out := []string{}
	for round := 0; len(out) < min(max(n, 0), len(ranked)); round++ {
		for _, d := range order {
			if round < len(byDomain[d]) && len(out) < n {
				out = append(out, byDomain[d][round])
			}
		}
	}
	return out
}

// rankCanaries orders nodes, once each, by the hash of (sha, node).
func rankCanaries(sha string, nodes []string) []string {
	all := slices.Clone(nodes)
	slices.Sort(all)
	all = slices.Compact(all)
	rank := make(map[string]uint64, len(all))
	for _, node := range all {
		h := sha256.Sum256([]byte(sha + "\x00" + node))
		rank[node] = binary.BigEndian.Uint64(h[:8])
	}
	sort.SliceStable(all, func(i, j int) bool { return rank[all[i]] < rank[all[j]] })
	return all
}

// canaryHealthy says every canary of the desired SHA is converged on it,
// not down and without a failure, and no brake holds the group: what
// auto-promotion counts, which a pause or a CANCEL therefore restarts.
func (g *GroupState) canaryHealthy() bool {
	c := g.Canaries
	if c == nil || g.Desired == nil || g.Cancel != nil || g.OperatorPause != nil || g.Pause != nil {
		return false
	}
	failed := map[string]bool{}
	for _, f := range g.Failures {
		failed[f.Node] = true
	}
	for _, name := range c.Nodes {
		i := slices.IndexFunc(g.CanaryNodes, func(n NodeState) bool { return n.Node == name })
		if i < 0 || failed[name] || standing(g.Desired, &g.CanaryNodes[i]) != StandingConverged {
			return false
		}
		_, down := g.DownWhy[name]
		_, canaryDown := g.canaryDown[name]
		if down || canaryDown || slices.Contains(g.Unavailable, name) {
			return false
		}
	}
	return true
}

// CanarySeen is since when the reader has seen every canary of the
// desired SHA healthy (converged on it, not down, no failure) with no
// brake on the group, on its own monotonic clock; zero when it does not
// now. Auto-promotion counts from it: no host reads another's clock, and
// a reader that started later, or saw a canary down or a pause meanwhile,
// counts from later: longer, never shorter.
type CanarySeen struct {
	At time.Time
}

// canaryClocks are a store's sights of its groups' healthy canaries, by
// group root.
type canaryClocks struct {
	mu     sync.Mutex
	clocks map[string]canarySight
}

type canarySight struct {
	sha string
	at  time.Time
}

// withCanaries notes on the store's clock whether g's canaries are
// healthy now, and puts in g since when this store has seen them so.
func (s *Store) withCanaries(g *GroupState, k Keys) *GroupState {
	if g == nil || g.Spec == nil || g.Spec.Update.Canary == 0 || g.Desired == nil {
		return g
	}
	now, healthy := time.Now(), g.canaryHealthy()
	c := s.canaries
	if c == nil {
		if healthy {
			g.CanarySeen = CanarySeen{At: now} // a first sight at every read
		}
		return g
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cur := c.clocks[k.Root()]
	switch {
	case !healthy:
		delete(c.clocks, k.Root())
		return g
	case cur.sha != g.Desired.SHA || cur.at.IsZero():
		cur = canarySight{sha: g.Desired.SHA, at: now}
		c.clocks[k.Root()] = cur
	}
	g.CanarySeen = CanarySeen{At: cur.at}
	return g
}

// readCanaries reads, for an agent's look (ReadFor), what auto-promotion
// judges and the look did not read: the canaries' records and whether
// Consul sees them down. Only while it waits on them: a SHA with no
// canaries, promoted, or promoted by hand only, costs nothing more.
func (s *Store) readCanaries(ctx context.Context, g *GroupState, k Keys) error {
	if g.Spec == nil || !g.Spec.Update.AutoPromote || g.Canaries == nil || g.Promoted != nil {
		return nil
	}
	var keys []string
	for _, n := range g.Canaries.Nodes {
		if slices.ContainsFunc(g.CanaryNodes, func(r NodeState) bool { return r.Node == n }) {
			continue // read with the tree already (readFor's fallback)
		}
		keys = append(keys, k.Node(n))
	}
	for batch := range slices.Chunk(keys, maxTxnOps) {
		var ops api.TxnOps
		for _, key := range batch {
			// get-tree, not get: a get of an absent key fails the transaction.
			ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVGetTree, Key: key}})
		}
		resp, _, err := s.txn(withReadLimit(ctx, lookLimit), ops)
		if err != nil {
			return err
		}
		for _, r := range resp.Results {
			if r.KV == nil || !slices.Contains(batch, r.KV.Key) {
				continue // a tree of nodes/n1 also holds nodes/n10
			}
			var n NodeState
			if err := decode(r.KV.Key, r.KV.Value, &n); err == nil && k.Node(n.Node) == r.KV.Key {
				g.CanaryNodes = append(g.CanaryNodes, n)
			}
		}
	}
	down, err := s.Down(ctx, g.Group)
	if err != nil {
		// Unknown is not healthy: the canaries' clock starts again.
		g.Problems = append(g.Problems, "canaries: cannot read which nodes are down: "+err.Error())
		down = map[string]DownReason{}
		for _, n := range g.Canaries.Nodes {
			down[n] = DownWorkload
		}
	}
	g.canaryDown = down
	return nil
}

// canaryOps are what a commit of sha writes for its canaries: its
// promotion from an earlier rollout of sha deleted, so that each rollout
// waits on one of its own, and, when the spec has canaries, their record,
// chosen among the nodes that count now: a valid record, and an instance
// in Consul's catalog when the catalog lists any (a node gone from it
// would hold auto-promotion for good). The commit writes it, not the
// first agent to look: it is the operator's act, in the transaction that
// makes sha desired, so no agent's token may choose the canaries, and
// every agent reads one choice.
//
// A rollback (`rollagent rollback`, ev's kind) is promoted by the operator
// who makes it, in the same transaction: it goes back to a SHA that ran
// before, and an operator rolling back in a hurry should not have to
// promote as well. Its canaries are still recorded, for status.
func (s *Store) canaryOps(ctx context.Context, k Keys, group, sha string, u hashspec.Update, ev Event) (api.TxnOps, error) {
	n := u.Canary
	ops := api.TxnOps{{KV: &api.KVTxnOp{Verb: api.KVDelete, Key: k.Promoted(sha)}}}
	if n == 0 {
		return ops, nil
	}
	if ev.Kind == EventRollback {
		p := Promotion{SHA: sha, Reason: "promoted by the rollback", At: s.clock().UTC(), By: ev.By}
		ops = api.TxnOps{{KV: &api.KVTxnOp{Verb: api.KVSet, Key: k.Promoted(sha), Value: mustJSON(p)}}}
	}
	g, err := s.readTree(ctx, group, nil)
	if err != nil {
		return nil, err
	}
	registered, err := s.Registered(ctx, group)
	if err != nil {
		registered = nil
	}
	rec := Canaries{SHA: sha, Nodes: s.chooseCanaries(ctx, group, sha, u, g.Nodes, registered), At: s.clock().UTC()}
	return append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: k.Canaries(sha), Value: mustJSON(rec)}}), nil
}

// chooseCanaries are the u.Canary canaries of sha among nodes: those that
// count (canaryPool), less the nodes that go last, spread over the
// domains of update.max_parallel_per. One function for the commit and
// for `rollagent plan`, so a plan names the canaries the commit would.
func (s *Store) chooseCanaries(ctx context.Context, group, sha string, u hashspec.Update, nodes []NodeState, registered map[string]bool) []string {
	pool := withoutLast(canaryPool(nodes, registered), nodes, s.lastNodes(ctx, u))
	return ChooseCanariesIn(sha, pool, u.Canary, s.canaryDomains(ctx, group, u))
}

// lastNodes are the Consul nodes on which update.last's check passes: the
// nodes that go last, which no canary may be, or the canary stage would
// wait on them while they wait on it. Best effort: nil without update.last
// or when the check cannot be read (a leader chosen then is promoted by
// hand, as README says).
func (s *Store) lastNodes(ctx context.Context, u hashspec.Update) []string {
	if u.Last == nil {
		return nil
	}
	on, err := s.passingOn(ctx, u.Last.Check)
	if err != nil {
		return nil
	}
	return on
}

// withoutLast is pool less the nodes whose record's Consul node is in last.
func withoutLast(pool []string, nodes []NodeState, last []string) []string {
	if len(last) == 0 {
		return pool
	}
	out := pool[:0:0]
	for _, name := range pool {
		i := slices.IndexFunc(nodes, func(n NodeState) bool { return n.Node == name })
		if i < 0 || nodes[i].ConsulNode == "" || !slices.Contains(last, nodes[i].ConsulNode) {
			out = append(out, name)
		}
	}
	return out
}

// canaryPool are the nodes canaries are chosen from: those with a valid
// record and, when the catalog lists any instance of the group's service
// (registered), an instance there.
func canaryPool(nodes []NodeState, registered map[string]bool) []string {
	var out []string
	for _, r := range nodes {
		if len(registered) == 0 || registered[r.Node] {
			out = append(out, r.Node)
		}
	}
	return out
}

// canaryDomains are the domains the canaries spread over: by
// update.max_parallel_per's key, from the catalog; nil without one, or
// when the catalog cannot tell (the canaries are then chosen unspread).
func (s *Store) canaryDomains(ctx context.Context, group string, u hashspec.Update) map[string]string {
	if u.MaxParallelPer == nil {
		return nil
	}
	d, err := s.Domains(ctx, group, u.MaxParallelPer.Key)
	if err != nil {
		return nil
	}
	return d
}
