package integration

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/fleettest"
)

// faults is what the nemesis has broken and not yet healed, shared with
// the checker.
type faults struct {
	mu          sync.Mutex
	agents      map[string]bool   // agent killed
	nodes       map[string]bool   // whole node killed
	partitioned map[string]string // node -> its address
	server      string            // server killed, or ""
	// idle are nodes the nemesis took down outside any rollout step:
	// "killed", then "revived" until the checker sees them healthy or
	// holding a slot. They are the N of invariant (a).
	idle map[string]string
	// grand are nodes that were down for the rollout (or held the slot)
	// when the nemesis took an idle node of their group down: the
	// rollout could not have known. Cleared by the checker once healthy.
	grand map[string]bool
	// idleKilled is when the nemesis last took an idle node of each group
	// down.
	idleKilled map[string]time.Time
}

// detectWindow bounds how long after a node dies outside any step the
// rollout may not yet know it: its agent's liveness check goes critical
// about 3 s after the agent dies, its host's serfHealth 5-8 s after the
// host does at Consul's default gossip (README, Guarantees and limits).
const detectWindow = 10 * time.Second

func newFaults() *faults {
	return &faults{agents: map[string]bool{}, nodes: map[string]bool{}, partitioned: map[string]string{},
		idle: map[string]string{}, grand: map[string]bool{}, idleKilled: map[string]time.Time{}}
}

// apply runs one event. An error is the operation's, logged on the
// timeline: the nemesis goes on, and the invariants judge the product.
func (n *nemesis) apply(e event) error {
	switch e.kind {
	case opCommit, opCommitBad:
		return n.commit(e)
	case opCancel:
		return n.cancel(e.group)
	case opRollback:
		ctx, cancel := n.c.ctx()
		defer cancel()
		res, err := n.c.store().Rollback(ctx, e.group, "", "nemesis")
		if err == nil {
			n.note("rollback %s -> %s", e.group, coordinator.ShortSHA(res.SHA))
		}
		return err
	case opResume:
		ctx, cancel := n.c.ctx()
		defer cancel()
		_, err := n.c.store().Resume(ctx, e.group)
		return err
	case opKillAgent, opStartAgent:
		return n.agent(e.node, e.kind == opKillAgent)
	case opKillNode:
		return n.killNode(e.node)
	case opReviveNode:
		return n.reviveNode(e.node)
	case opPartition, opHeal:
		return n.partition(e.node, e.kind == opPartition)
	case opKillLeader, opStartSrv:
		return n.server(e.kind == opKillLeader)
	}
	return fmt.Errorf("unknown event %q", e.kind)
}

// commit commits a release with a generation of its own in its env, so
// that every commit is a new SHA that no cancel has touched.
func (n *nemesis) commit(e event) error {
	n.gen++
	release := []string{"v1", "v2", "v3"}[n.gen%3]
	env := map[string]string{}
	if e.kind == opCommitBad {
		release, env["DEMOAPP_UNHEALTHY"] = "bad", "1"
	}
	spec := fleettest.Spec(n.t, fleettest.SpecOptions{Group: e.group, Image: n.c.releases.Image(release, env),
		MaxParallel: 1, FailureAction: e.action, MaxFailures: e.maxF, HealthyDeadline: testHealthyDeadline,
		ProbeTimeout: probeTimeout, ProbeRetries: probeRetries,
		Env: map[string]string{"NEMESIS_GEN": strconv.Itoa(n.gen)}})
	ctx, cancel := n.c.ctx()
	defer cancel()
	res, err := n.c.store().Commit(ctx, e.group, spec, "nemesis", "commit")
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.bad[res.SHA] = e.kind == opCommitBad
	n.mu.Unlock()
	n.note("committed %s to %s: %s", release, e.group, coordinator.ShortSHA(res.SHA))
	return nil
}

func (n *nemesis) cancel(group string) error {
	ctx, cancel := n.c.ctx()
	defer cancel()
	res, err := n.c.store().Cancel(ctx, group, "", "nemesis", "nemesis")
	if err == nil {
		n.note("cancelled %s of %s", coordinator.ShortSHA(res.SHA), group)
	}
	return err
}

func (n *nemesis) agent(node string, kill bool) error {
	n.f.mu.Lock()
	n.f.agents[node] = kill
	n.f.mu.Unlock()
	if kill {
		return n.c.killErr(n.c.agentName(node))
	}
	return n.c.startErr(n.c.agentName(node))
}

// killNode kills a whole node. It counts as the nemesis' own (N) only if
// it was in no rollout step: one container, running, not holding the
// slot, its record not replacing or verifying. Otherwise it is a holder
// dead mid-replacement, which the rollout answers for.
func (n *nemesis) killNode(node string) error {
	g := n.c.nodes[node]
	inStep, others := n.stepping(g, node)
	n.f.mu.Lock()
	n.f.nodes[node] = true
	if !inStep {
		n.f.idle[node] = "killed"
		n.f.idleKilled[g] = time.Now()
		for _, o := range others {
			n.f.grand[o] = true
		}
	}
	n.f.mu.Unlock()
	n.note("node %s killed (in a rollout step: %v; others of its group in one: %v)", node, inStep, others)
	return n.c.killNodeErr(node)
}

// stepping says whether node is in a rollout step, and which other nodes
// of group are. A read that fails counts node as in a step: the lenient
// side, since it keeps node out of N.
func (n *nemesis) stepping(group, node string) (bool, []string) {
	ws, err := fleettest.ListWorkloads(n.c.docker, group)
	if err != nil {
		return true, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	gs, err := n.c.store().Read(ctx, group, nil)
	if err != nil {
		return true, nil
	}
	// in: a step shows in Docker as two containers or none running under
	// the managed name. A running container that failed a probe is not in
	// one (see upTracker), but for the others, which only widen G, it is.
	in, others := map[string]bool{}, map[string]bool{}
	for nd, w := range ws {
		if len(w.IDs) > 1 || w.Managed == "" || !slices.Contains(w.Running, w.Managed) {
			in[nd] = true
		}
		others[nd] = !w.Healthy
	}
	for _, e := range gs.Holders.Holding {
		in[e.Name] = true
	}
	for _, ns := range gs.Nodes {
		if ns.State == coordinator.StateReplacing || ns.State == coordinator.StateVerifying {
			in[ns.Node] = true
		}
	}
	var list []string
	for nd := range n.c.nodes {
		if nd != node && n.c.nodes[nd] == group && (in[nd] || others[nd]) {
			list = append(list, nd)
		}
	}
	sort.Strings(list)
	_, present := ws[node]
	return in[node] || !present, list
}

func (n *nemesis) reviveNode(node string) error {
	n.f.mu.Lock()
	delete(n.f.nodes, node)
	if n.f.idle[node] == "killed" {
		n.f.idle[node] = "revived"
	}
	n.f.mu.Unlock()
	err := n.c.reviveNodeErr(node, false)
	if err != nil {
		// Still down: healAll boots it again.
		n.f.mu.Lock()
		n.f.nodes[node] = true
		n.f.mu.Unlock()
	}
	return err
}

func (n *nemesis) partition(node string, cut bool) error {
	if cut {
		ip, err := n.c.partitionErr(node)
		if err == nil {
			n.f.mu.Lock()
			n.f.partitioned[node] = ip
			n.f.mu.Unlock()
		}
		return err
	}
	n.f.mu.Lock()
	ip, ok := n.f.partitioned[node]
	n.f.mu.Unlock()
	if !ok {
		return nil
	}
	if err := n.c.healErr(node, ip); err != nil {
		return err // still cut off: healAll tries again
	}
	n.f.mu.Lock()
	delete(n.f.partitioned, node)
	n.f.mu.Unlock()
	return nil
}

// server kills the leading server, or starts the one killed.
func (n *nemesis) server(kill bool) error {
	n.f.mu.Lock()
	down := n.f.server
	n.f.mu.Unlock()
	if !kill {
		if down == "" {
			return nil
		}
		n.f.mu.Lock()
		n.f.server = ""
		n.f.mu.Unlock()
		return n.c.startErr(down)
	}
	if !n.c.serversWhole() {
		return fmt.Errorf("skipped: not every server is back and agrees on a leader yet")
	}
	leader, err := n.c.leaderErr()
	if err != nil {
		return err
	}
	n.f.mu.Lock()
	n.f.server = leader
	n.f.mu.Unlock()
	n.note("leader %s killed", leader)
	return n.c.killErr(leader)
}

// healAll ends every fault still under way: the nemesis has stopped.
func (n *nemesis) healAll() {
	n.f.mu.Lock()
	var agents, nodes, parts []string
	for a, down := range n.f.agents {
		if down {
			agents = append(agents, a)
		}
	}
	for nd := range n.f.nodes {
		nodes = append(nodes, nd)
	}
	for p := range n.f.partitioned {
		parts = append(parts, p)
	}
	n.f.mu.Unlock()
	for _, p := range parts {
		n.step(event{kind: opHeal, node: p})
	}
	n.step(event{kind: opStartSrv})
	for _, nd := range nodes {
		n.step(event{kind: opReviveNode, node: nd})
	}
	for _, a := range agents {
		n.step(event{kind: opStartAgent, node: a})
	}
}
