package coordinator

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/lockstep"
)

// Domain is the topology domain (update.max_parallel_per) of a Consul
// node whose node meta is meta: "key=value", or "" when it has no value
// for key, which is a domain of its own. The key is part of it, so that a
// claim written under one key never shares a domain under another.
func Domain(key string, meta map[string]string) string {
	v, ok := meta[key]
	if key == "" || !ok || v == "" {
		return ""
	}
	return key + "=" + v
}

// LocalDomain is the domain of the local Consul agent's node, by the node
// meta it is configured with (/v1/agent/self), which its anti-entropy
// puts into the catalog: read there, it is known from the agent's start,
// while the catalog may hold a node just joined without its meta for a
// moment. A token that may not read it is an error (ErrNoDomain), never
// a domain of its own.
func (s *Store) LocalDomain(ctx context.Context, key string) (string, error) {
	var self struct{ Meta map[string]string }
	if _, err := s.c.Raw().Query("/v1/agent/self", &self, (&api.QueryOptions{}).WithContext(ctx)); err != nil {
		return "", fmt.Errorf("%w: %w", ErrNoDomain, consulError(s.c, err))
	}
	return Domain(key, self.Meta), nil
}

// Domains gives the domain of each node of group whose record names its
// Consul node (consul_node), by that node's meta in Consul's catalog: so
// a node whose agent is gone still has one. A Consul node the catalog no
// longer lists with the key (pruned: `consul force-leave -prune`, or
// reaped) has the domain its record carries (NodeState.Domain), when it
// is one of key's: a down node must not drop out of its zone's count when
// the catalog forgets it. A node it leaves out is a domain of its own.
func (s *Store) Domains(ctx context.Context, group, key string) (map[string]string, error) {
	k, err := s.Keys(group)
	if err != nil {
		return nil, err
	}
	recs, _, err := s.nodeRecords(ctx, k)
	if err != nil {
		return nil, err
	}
	// Only the nodes that have the key: a datacenter's catalog may list
	// thousands. The key is a node-meta key (hashspec checks it), safe to
	// quote into the filter.
	q := &api.QueryOptions{Filter: fmt.Sprintf("%q in Meta", key)}
	nodes, qm, err := s.c.Catalog().Nodes(q.WithContext(ctx))
	if err != nil {
		return nil, consulError(s.c, err)
	}
	if qm.ResultsFilteredByACLs {
		// A node left out would be a domain of its own: one of a full
		// zone could be taken for none.
		return nil, fmt.Errorf("%w: the token may not read every node of Consul's catalog, so Consul left some out", ErrACLDenied)
	}
	meta := make(map[string]map[string]string, len(nodes))
	for _, n := range nodes {
		meta[n.Node] = n.Meta
	}
	out := map[string]string{}
	for name, r := range recs {
		d, listed := "", false
		if r.ConsulNode != "" {
			var m map[string]string
			m, listed = meta[r.ConsulNode]
			d = Domain(key, m)
		}
		if !listed && strings.HasPrefix(r.Domain, key+"=") {
			// Also a node whose meta lost the key (the filter leaves it
			// out) while its record still names a zone: it counts there,
			// the safe side, until its agent's next look, which reads the
			// meta each time, writes its record without one.
			d = r.Domain
		}
		if d != "" {
			out[name] = d
		}
	}
	return out, nil
}

// DomainWait is a node that waits in line for its domain: Used, as many
// as Max or more, are unavailable in it.
type DomainWait struct {
	Node   string
	Domain string
	Used   []string // sorted
	Max    int
}

// SpreadWaits lists the nodes of waiting whose domain is full by b, the
// slot budget, under spread: the head of the line of such a domain takes
// no slot. A user of a slot is in the domain its holder entry or claim
// records (what the head counts by), else in the one domains gives it
// (a node down outside the line); a waiter in the one domains gives.
func SpreadWaits(spread *hashspec.Spread, b Budget, h *lockstep.Holders, domains map[string]string, waiting []string) []DomainWait {
	if spread == nil || spread.Max < 1 {
		return nil
	}
	used := map[string][]string{}
	for _, u := range b.Users {
		if d := usedDomain(h, u.Node, domains); d != "" {
			used[d] = append(used[d], u.Node)
		}
	}
	var out []DomainWait
	for _, n := range waiting {
		d := domains[n]
		others := slices.DeleteFunc(slices.Clone(used[d]), func(o string) bool { return o == n })
		if d == "" || len(others) < spread.Max {
			continue
		}
		sort.Strings(others)
		out = append(out, DomainWait{Node: n, Domain: d, Used: others, Max: spread.Max})
	}
	return out
}

// usedDomain is the domain in which node uses a slot.
func usedDomain(h *lockstep.Holders, node string, domains map[string]string) string {
	if h != nil {
		if c, ok := h.ClaimOf(node); ok && !c.Lost {
			return c.Domain
		}
		for _, e := range h.Holding {
			if e.Name == node {
				return e.Domain
			}
		}
	}
	return domains[node]
}
