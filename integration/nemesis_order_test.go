package integration

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
)

// canaryHealthy is the canary_healthy_time of the nemesis' auto-promoted
// commits.
const canaryHealthy = 5 * time.Second

// orderOf is how a nemesis commit moves: its canaries and update.after.
type orderOf struct {
	group  string
	canary int
	auto   bool
	after  string
}

// ordered puts e's canary and after on spec.
func ordered(spec *hashspec.Spec, e event) {
	spec.Update.Canary, spec.Update.AutoPromote = e.canary, e.auto
	if e.auto {
		spec.Update.CanaryHealthyTime = hashspec.Duration(canaryHealthy)
	}
	if e.after != "" {
		spec.Update.After = []string{e.after}
	}
}

// noteOrder remembers how a committed SHA moves, for (g) and (h).
func (n *nemesis) noteOrder(sha string, e event) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.orders[sha] = orderOf{group: e.group, canary: e.canary, auto: e.auto, after: e.after}
}

// promote is rollagent promote of the group's desired SHA.
func (n *nemesis) promote(group string) error {
	ctx, cancel := n.c.ctx()
	defer cancel()
	res, err := n.c.store().PromoteBy(ctx, group, "nemesis", nemesisAuthor)
	if err != nil {
		return err
	}
	if !res.Already {
		n.mu.Lock()
		n.promoteCalls++
		n.mu.Unlock()
		n.note("promoted %s of %s (the call returned)", coordinator.ShortSHA(res.SHA), group)
	}
	return nil
}

// noteOrderGate counts the samples that saw a group held by its order.
func (ck *checker) noteOrderGate(g string, gs *coordinator.GroupState) {
	st := gs.Gate().State
	ck.n.mu.Lock()
	defer ck.n.mu.Unlock()
	switch st {
	case coordinator.GateAwaitingPromotion:
		ck.n.awaitSamples++
	case coordinator.GateWaitingForGroup:
		ck.n.afterSamples++
	}
}

// desiredSeen keeps each version of group's desired record.
func (w *gateWatch) desiredSeen(group, key string, pairs api.KVPairs) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range pairs {
		var d coordinator.Desired
		if p.Key == key && json.Unmarshal(p.Value, &d) == nil {
			w.desired[group][p.ModifyIndex] = d.SHA
		}
	}
}

// canariesSeen keeps each version of group's canary records.
func (w *gateWatch) canariesSeen(group string, pairs api.KVPairs) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range pairs {
		var c coordinator.Canaries
		if json.Unmarshal(p.Value, &c) == nil {
			w.canaries[group][p.ModifyIndex] = c
		}
	}
}

// history is what the watch saw of group: its desired versions and its
// nodes' record versions, sorted by index.
func (w *gateWatch) history(group string) ([]shaVer, map[string][]recVer) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var ds []shaVer
	for i, sha := range w.desired[group] {
		ds = append(ds, shaVer{index: i, sha: sha})
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i].index < ds[j].index })
	recs := map[string][]recVer{}
	for key, ns := range w.records {
		g, rest, _ := strings.Cut(key, "/")
		if g != group {
			continue
		}
		var idx uint64
		if _, err := fmt.Sscanf(rest[strings.LastIndex(rest, "/")+1:], "%d", &idx); err != nil {
			continue
		}
		recs[ns.Node] = append(recs[ns.Node], recVer{index: idx, sha: ns.SHA, converged: ns.State == coordinator.StateConverged})
	}
	for _, vs := range recs {
		sort.Slice(vs, func(i, j int) bool { return vs[i].index < vs[j].index })
	}
	return ds, recs
}

// canariesAt is sha's canary record in group in effect at index: the
// latest version seen before it.
func (w *gateWatch) canariesAt(group, sha string, index uint64) ([]string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var best uint64
	var nodes []string
	for i, c := range w.canaries[group] {
		if c.SHA == sha && i < index && i >= best {
			best, nodes = i, c.Nodes
		}
	}
	return nodes, best != 0
}

// orderLog is what (g) and (h) need of a group's event log: per SHA, the
// indexes of its commits (an operator's rollbacks included), each of which
// deletes any promotion before it (coordinator's canaryOps), and of its
// promotions.
type orderLog struct{ commits, promotions map[string][]uint64 }

func (n *nemesis) orderLog(group string) (orderLog, error) {
	ctx, cancel := n.c.ctx()
	defer cancel()
	log, err := n.c.store().Events(ctx, group)
	if err != nil {
		return orderLog{}, err
	}
	l := orderLog{commits: map[string][]uint64{}, promotions: map[string][]uint64{}}
	for _, e := range log.Events {
		// An agent's rollback (EventAutoRollback) writes desired alone:
		// the target's canary record and promotion from its own rollout
		// stand, so it starts no rollout of its own here.
		switch e.Kind {
		case coordinator.EventCommit:
			l.commits[e.SHA] = append(l.commits[e.SHA], e.CreateIndex)
		case coordinator.EventRollback: // promoted in its own transaction (canaryOps)
			l.commits[e.SHA] = append(l.commits[e.SHA], e.CreateIndex)
			l.promotions[e.SHA] = append(l.promotions[e.SHA], e.CreateIndex)
		case coordinator.EventPromote:
			l.promotions[e.SHA] = append(l.promotions[e.SHA], e.CreateIndex)
		}
	}
	return l, nil
}

// lastBefore is the greatest of idxs below index, 0 for none.
func lastBefore(idxs []uint64, index uint64) uint64 {
	var out uint64
	for _, i := range idxs {
		if i < index && i > out {
			out = i
		}
	}
	return out
}

// orderTally counts what (g) and (h) judged, for the report.
type orderTally struct {
	canaryGrants, promoted, auto, gBad, gUnjudged int
	afterGrants, atGrant, raced, hBad             int
}

// judgeOrders is invariants (g) and (h) over every grant the watch saw of
// a nemesis commit with canaries or update.after.
func (n *nemesis) judgeOrders() string {
	logs := map[string]orderLog{}
	for _, g := range nemesisGroups() {
		l, err := n.orderLog(g)
		if err != nil {
			n.violate("g events "+g, "(g) cannot read the event log of %s: %v", g, err)
		}
		logs[g] = l
	}
	w := n.gw
	w.mu.Lock()
	grants := make([]*grantSeen, 0, len(w.grants))
	for _, g := range w.grants {
		grants = append(grants, g)
	}
	w.mu.Unlock()
	slices.SortFunc(grants, func(a, b *grantSeen) int { return cmp.Compare(a.index, b.index) })
	var t orderTally
	for _, g := range grants {
		n.mu.Lock()
		o, ours := n.orders[g.sha]
		n.mu.Unlock()
		if g.sha == "" || !ours || g.index < n.gateStart {
			continue
		}
		reset := lastBefore(logs[g.group].commits[g.sha], g.index)
		if o.canary > 0 {
			n.judgeCanary(g, o, reset, logs[g.group], &t)
		}
		if o.after != "" {
			n.judgeAfter(g, o, reset, &t)
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return fmt.Sprintf("order: promote calls %d, %d samples awaiting promotion, %d waiting for a group; "+
		"(g) %d grants of non-canaries of canary commits, %d after a promotion, %d auto-promoted, %d not judged, %d violations; "+
		"(h) %d grants of after commits, %d with the named group converged at the grant, %d raced a move of it, %d violations",
		n.promoteCalls, n.awaitSamples, n.afterSamples, t.canaryGrants, t.promoted, t.auto, t.gUnjudged, t.gBad,
		t.afterGrants, t.atGrant, t.raced, t.hBad)
}

func (n *nemesis) judgeCanary(g *grantSeen, o orderOf, reset uint64, l orderLog, t *orderTally) {
	f := canaryFacts{reset: reset, promotions: l.promotions[g.sha], auto: o.auto, converged: map[string][]uint64{}}
	f.canaries, f.seen = n.gw.canariesAt(g.group, g.sha, g.index)
	_, recs := n.gw.history(g.group)
	for node, vs := range recs {
		for _, v := range vs {
			if v.converged && v.sha == g.sha {
				f.converged[node] = append(f.converged[node], v.index)
			}
		}
	}
	v, why := judgeCanaryGrant(g.node, g.index, f)
	where := fmt.Sprintf("grant of %s to %s of %s at index %d", coordinator.ShortSHA(g.sha), g.node, g.group, g.index)
	if v != canaryNotJudged || why != "" {
		t.canaryGrants++
	}
	switch v {
	case canaryPromoted:
		t.promoted++
	case canaryAuto:
		t.auto++
	case canaryViolation:
		t.gBad++
		n.violate("g "+g.group, "(g) %s: %s", where, why)
	case canaryNotJudged:
		if why != "" {
			t.gUnjudged++
			n.note("%s not judged by (g): %s", where, why)
		}
	}
}

func (n *nemesis) judgeAfter(g *grantSeen, o orderOf, from uint64, t *orderTally) {
	ds, recs := n.gw.history(o.after)
	some, at := judgeAfterGrant(g.index, afterFacts{from: from, nodes: n.nodesOf(o.after), desired: ds, records: recs})
	t.afterGrants++
	where := fmt.Sprintf("grant of %s to %s of %s at index %d", coordinator.ShortSHA(g.sha), g.node, g.group, g.index)
	switch {
	case !some:
		t.hBad++
		n.violate("h "+g.group, "(h) %s: %s was not converged at any index from the commit at %d to the grant", where, o.after, from)
	case at:
		t.atGrant++
	default:
		t.raced++
		n.note("%s raced a move of %s: converged since the commit at index %d, not at the grant", where, o.after, from)
	}
}
