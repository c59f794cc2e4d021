package coordinator

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/hashspec"
)

// BlockHealth reads the health of the Consul checks u blocks on, in one
// request: every check that matches a block of u.BlockOn, anywhere, and,
// when local is set, of u.BlockOnNode on the Consul node of the agent the
// store's client talks to (an agent's own). Without local, the node's
// blocks are not read: each agent judges its own. It never fails: a read
// that fails is GateHealth.Err, which keeps the gate closed.
func (s *Store) BlockHealth(ctx context.Context, u *hashspec.Update, local bool) *GateHealth {
	return s.blockHealth(ctx, u, local, false, nil)
}

// BlockHealthNow is BlockHealth (local) read consistently: the leader
// confirms with a quorum that it still leads before it answers, so the
// answer holds every change of a check Consul applied before the read
// began, which a read of a leader just deposed may not. For the read right
// before a grant, whose window it bounds; one round trip more than
// BlockHealth's.
func (s *Store) BlockHealthNow(ctx context.Context, u *hashspec.Update) *GateHealth {
	return s.blockHealth(ctx, u, true, true, nil)
}

// blockHealth is BlockHealth, and, for the Consul nodes of others (those
// the group's records name), GateHealth.OnNodes.
func (s *Store) blockHealth(ctx context.Context, u *hashspec.Update, local, consistent bool, others []string) *GateHealth {
	var node string
	if local && len(u.BlockOnNode) > 0 {
		name, err := s.c.Agent().NodeName()
		if err != nil || name == "" {
			return &GateHealth{Err: fmt.Sprintf("cannot read the local Consul agent's node name for block_on_node (agent:read on it): %v", consulError(s.c, err))}
		}
		node = name
	}
	expr := blockFilter(u.BlockOn)
	if node != "" {
		expr = orFilter(expr, fmt.Sprintf("(Node == %q and (%s))", node, blockFilter(u.BlockOnNode)))
	}
	if len(others) > 0 && len(u.BlockOnNode) > 0 {
		expr = orFilter(expr, blockFilter(u.BlockOnNode))
	}
	if expr == "" {
		return &GateHealth{}
	}
	checks, meta, err := s.c.Health().State(api.HealthAny, (&api.QueryOptions{Filter: expr, RequireConsistent: consistent}).WithContext(ctx))
	if err != nil {
		return &GateHealth{Err: consulError(s.c, err).Error()}
	}
	if meta.ResultsFilteredByACLs {
		return &GateHealth{Err: "consul: permission denied: the token may not read every check it blocks on (service:read and node:read), so Consul left some out"}
	}
	h := &GateHealth{Failing: blockFailures(u.BlockOn, false, "", checks), Index: meta.LastIndex}
	if node != "" {
		h.Failing = append(h.Failing, blockFailures(u.BlockOnNode, true, node, checks)...)
	}
	for _, n := range others {
		if f := blockFailures(u.BlockOnNode, true, n, checks); len(f) > 0 {
			if h.OnNodes == nil {
				h.OnNodes = map[string][]BlockFailure{}
			}
			h.OnNodes[n] = f
		}
	}
	return h
}

// blockFailures are the blocks of bs that do not pass among checks: on
// node only, when node is set.
func blockFailures(bs []hashspec.Block, onNode bool, node string, checks api.HealthChecks) []BlockFailure {
	var out []BlockFailure
	for _, b := range bs {
		var failing []*api.HealthCheck
		matched := false
		for _, c := range checks {
			if (node != "" && c.Node != node) || !blockMatches(b, c) {
				continue
			}
			matched = true
			if c.Status != api.HealthPassing {
				failing = append(failing, c)
			}
		}
		if !matched {
			out = append(out, BlockFailure{Block: b, OnNode: onNode, Node: node})
			continue
		}
		slices.SortFunc(failing, func(x, y *api.HealthCheck) int {
			return cmp.Or(strings.Compare(x.Node, y.Node), strings.Compare(x.ServiceID, y.ServiceID), strings.Compare(x.CheckID, y.CheckID))
		})
		for _, c := range failing {
			out = append(out, BlockFailure{Block: b, OnNode: onNode, Check: cmp.Or(c.Name, c.CheckID), CheckID: c.CheckID,
				Status: c.Status, Node: c.Node, Service: c.ServiceName})
		}
	}
	return out
}

func blockMatches(b hashspec.Block, c *api.HealthCheck) bool {
	if b.Service != "" {
		return c.ServiceName == b.Service && (b.Tag == "" || slices.Contains(c.ServiceTags, b.Tag))
	}
	return c.CheckID == b.Check || c.Name == b.Check
}

// blockFilter is a filter of Consul's health API for the checks of bs.
func blockFilter(bs []hashspec.Block) string {
	var expr string
	for _, b := range bs {
		var e string
		switch {
		case b.Service != "" && b.Tag != "":
			e = fmt.Sprintf("(ServiceName == %q and %q in ServiceTags)", b.Service, b.Tag)
		case b.Service != "":
			e = fmt.Sprintf("ServiceName == %q", b.Service)
		default:
			e = fmt.Sprintf("CheckID == %q or Name == %q", b.Check, b.Check)
		}
		expr = orFilter(expr, e)
	}
	return expr
}

func orFilter(a, b string) string {
	if a == "" {
		return b
	}
	return a + " or " + b
}

// withHealth sets g.Health when its desired spec blocks on Consul checks:
// for an agent (local), its own node's; else every node's, by the Consul
// node its record names.
func (s *Store) withHealth(ctx context.Context, g *GroupState, local bool) *GroupState {
	if g == nil || g.Spec == nil || !g.Spec.Update.Blocks() {
		return g
	}
	var others []string
	if !local {
		for _, n := range g.Nodes {
			if n.ConsulNode != "" && !slices.Contains(others, n.ConsulNode) {
				others = append(others, n.ConsulNode)
			}
		}
	}
	g.Health = s.blockHealth(ctx, &g.Spec.Update, local, false, others)
	if !local {
		g.Health.seenSince(g.Nodes)
	}
	return g
}
