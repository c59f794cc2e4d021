package integration

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/rollagent/rollagent/coordinator"
)

// faults is what the nemesis has broken and not yet healed, shared with
// the checker.
type faults struct {
	mu          sync.Mutex
	agents      map[string]bool          // agent stopped (SIGKILL or SIGTERM): healAll starts it
	paused      map[string]bool          // agent frozen
	nodes       map[string]bool          // host down (killed or rebooted)
	rebooting   map[string]chan struct{} // closed once the reboot has taken the host down
	partitioned map[string]string        // node -> its address
	server      string                   // server killed, or ""
	crash       map[string]chan struct{} // closed to end a node's crash loop
	wedged      map[string]int           // node -> pid of its frozen workload
	// target is the node a scheduled fault hit (a holder may stand in for
	// the node drawn), and busy the nodes under a fault now: never two
	// faults on one node.
	target map[string]string
	busy   map[string]bool
	// idle are the nodes the nemesis took down while they were in no
	// rollout step: the N of invariant (a).
	idle map[string]*outage
	// grand are the nodes of G in invariant (a): cleared by the checker
	// once seen up and not holding.
	grand map[string]bool
}

// outage is a node of N.
type outage struct {
	cause string
	// notice: the node's agent stopped cleanly before its host went down,
	// so the rollout was told before anything went down: no blind window.
	notice  bool
	revived bool      // the fault ended: in N until seen up (or holding)
	onset   time.Time // the first sample that saw it down
	known   time.Time // the first sample where Consul showed one of its checks not passing
}

// detectWindow bounds how long after a node goes down outside any step
// the rollout may not know it, when Consul has not shown it sooner: a
// host's serfHealth goes critical 5-8 s after it dies at Consul's default
// gossip, a workload's check is run every 10 s (README, Guarantees and
// limits). The checker ends the window as soon as Consul shows one of the
// node's checks not passing.
const detectWindow = 12 * time.Second

func newFaults() *faults {
	return &faults{agents: map[string]bool{}, paused: map[string]bool{}, nodes: map[string]bool{},
		rebooting: map[string]chan struct{}{}, partitioned: map[string]string{}, crash: map[string]chan struct{}{},
		wedged: map[string]int{}, target: map[string]string{}, busy: map[string]bool{},
		idle: map[string]*outage{}, grand: map[string]bool{}}
}

// fault starts or ends a fault on a node.
func (n *nemesis) fault(e event) error {
	switch e.kind {
	case opKillAgent, opTermAgent, opPauseAgent, opBlipAgent, opKillNode, opReboot, opCrash, opWedge, opPartition:
		node := n.hit(e)
		if node == "" {
			return fmt.Errorf("skipped: %s is under another fault", e.node)
		}
		if node != e.node {
			n.note("%s: %s stands in for %s (it holds a slot)", e.kind, node, e.node)
		}
		return n.begin(e.kind, node)
	case opStartAgent, opResumeAgnt, opReviveNode, opCrashEnd, opUnwedge, opHeal:
		n.f.mu.Lock()
		node, ok := n.f.target[e.node]
		delete(n.f.target, e.node)
		delete(n.f.busy, node)
		n.f.mu.Unlock()
		if !ok {
			return nil // its start was skipped
		}
		return n.end(e.kind, node)
	}
	return fmt.Errorf("unknown event %q", e.kind)
}

// hit picks the node a fault hits: the node drawn, or for a SIGTERM or a
// freeze of an agent, a holder of its group if one is free, since a stop
// or a pause mid-step is the case that matters; on an exec host, a kill
// of the agent too: one mid-hook leaves the hook running (issue 25, item 5).
func (n *nemesis) hit(e event) string {
	node := e.node
	if e.kind == opTermAgent || e.kind == opPauseAgent || e.kind == opBlipAgent || e.kind == opKillAgent && n.c.isExec(node) {
		if h := n.c.state(n.c.nodes[node]).Holders; h != nil {
			n.f.mu.Lock()
			for _, c := range h.Holding {
				if !n.f.busy[c.Name] {
					node = c.Name
					break
				}
			}
			n.f.mu.Unlock()
		}
	}
	n.f.mu.Lock()
	defer n.f.mu.Unlock()
	if n.f.busy[node] {
		return ""
	}
	n.f.busy[node], n.f.target[e.node] = true, node
	return node
}

func (n *nemesis) begin(kind, node string) error {
	switch kind {
	case opKillAgent, opTermAgent:
		n.f.mu.Lock()
		n.f.agents[node] = true
		n.f.mu.Unlock()
		if kind == opKillAgent {
			return n.c.agentSignalErr(node, "KILL")
		}
		return n.c.agentSignalErr(node, "TERM")
	case opPauseAgent, opBlipAgent:
		n.f.mu.Lock()
		n.f.paused[node] = true
		n.f.mu.Unlock()
		return n.c.agentPauseErr(node, true)
	case opKillNode:
		n.outage(node, kind, false)
		n.f.mu.Lock()
		n.f.nodes[node] = true
		n.f.mu.Unlock()
		return n.c.killNodeErr(node)
	case opReboot:
		return n.reboot(node)
	case opCrash:
		return n.crashLoop(node)
	case opWedge:
		return n.wedge(node)
	case opPartition:
		return n.partition(node, true)
	}
	return fmt.Errorf("unknown fault %q", kind)
}

func (n *nemesis) end(kind, node string) error {
	switch kind {
	case opStartAgent:
		n.f.mu.Lock()
		n.f.agents[node] = false
		n.f.mu.Unlock()
		return n.c.agentStartErr(node)
	case opResumeAgnt:
		n.f.mu.Lock()
		delete(n.f.paused, node)
		n.f.mu.Unlock()
		return n.c.agentPauseErr(node, false)
	case opReviveNode:
		return n.reviveNode(node)
	case opCrashEnd:
		n.f.mu.Lock()
		if stop, ok := n.f.crash[node]; ok {
			close(stop)
			delete(n.f.crash, node)
		}
		n.f.mu.Unlock()
		n.revived(node)
		return nil
	case opUnwedge:
		n.f.mu.Lock()
		pid, ok := n.f.wedged[node]
		delete(n.f.wedged, node)
		n.f.mu.Unlock()
		n.revived(node)
		if !ok || pid <= 0 {
			return nil
		}
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("SIGCONT %d: %w", pid, err)
		}
		return nil // a frozen process the agent replaced is gone: nothing to thaw
	case opHeal:
		return n.partition(node, false)
	}
	return fmt.Errorf("unknown fault end %q", kind)
}

// outage puts node in N if it is in no rollout step now; otherwise its
// fault hit a step under way, which the rollout answers for (K).
func (n *nemesis) outage(node, cause string, notice bool) {
	inStep, others := n.stepping(n.c.nodes[node], node)
	n.note("%s %s (in a rollout step: %v; others of its group in one: %v)", cause, node, inStep, others)
	if inStep {
		return
	}
	n.f.mu.Lock()
	n.f.idle[node] = &outage{cause: cause, notice: notice}
	n.f.mu.Unlock()
}

func (n *nemesis) revived(node string) {
	n.f.mu.Lock()
	if o := n.f.idle[node]; o != nil {
		o.revived = true
	}
	n.f.mu.Unlock()
}

// reboot stops node's agent with SIGTERM, as systemd does at shutdown,
// and once it has exited (it may finish a step first) takes the host
// down: its Consul client leaves, its workloads stop. It runs on in the
// background so the schedule goes on; revive-node waits for it.
func (n *nemesis) reboot(node string) error {
	done := make(chan struct{})
	n.f.mu.Lock()
	n.f.agents[node], n.f.nodes[node], n.f.rebooting[node] = true, true, done
	n.f.mu.Unlock()
	if err := n.c.agentSignalErr(node, "TERM"); err != nil {
		close(done)
		return err
	}
	go func() {
		defer close(done)
		if !n.c.agentExited(node, agentLease) {
			n.note("reboot %s: the agent still runs %s after SIGTERM; the host goes down anyway", node, agentLease)
		}
		n.outage(node, "reboot: host down after the agent's clean stop;", true)
		if err := n.c.hostDownErr(node, true); err != nil {
			n.note("reboot %s: %v", node, err)
		}
	}()
	return nil
}

// reviveNode boots a node that was killed or rebooted.
func (n *nemesis) reviveNode(node string) error {
	n.f.mu.Lock()
	done := n.f.rebooting[node]
	delete(n.f.rebooting, node)
	n.f.mu.Unlock()
	if done != nil {
		select { // bounded: the reboot's wait is
		case <-done:
		case <-time.After(agentLease + time.Minute):
		}
	}
	n.f.mu.Lock()
	delete(n.f.nodes, node)
	n.f.agents[node] = false
	n.f.mu.Unlock()
	n.revived(node)
	err := n.c.reviveNodeErr(node, false)
	if err != nil {
		// Still down: healAll boots it again.
		n.f.mu.Lock()
		n.f.nodes[node] = true
		n.f.mu.Unlock()
	}
	return err
}

// crashLoop kills the process of node's workload every second until the
// fault ends. The kill is the kernel's, not Docker's (docker kill marks a
// container stopped by hand): Docker restarts it under its restart policy,
// with growing delays, as it would a workload that crashes by itself.
func (n *nemesis) crashLoop(node string) error {
	n.outage(node, "workload crash loop on", false)
	stop := make(chan struct{})
	n.f.mu.Lock()
	n.f.crash[node] = stop
	n.f.mu.Unlock()
	go func() {
		for i := 0; i < 600; i++ { // bounded: the fault ends long before
			if pid, err := n.c.workloadPid(node); err == nil && pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL) // it may have died meanwhile
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Second):
			}
		}
	}()
	return nil
}

// wedge freezes the process of node's workload: the container keeps
// running, its probes time out, and Docker calls it unhealthy after its
// retries.
func (n *nemesis) wedge(node string) error {
	pid, err := n.c.workloadPid(node)
	if err != nil {
		return err
	}
	n.outage(node, "workload frozen on", false)
	if pid <= 0 {
		return fmt.Errorf("%s's workload has no process", node)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("SIGSTOP %d: %w", pid, err)
	}
	n.f.mu.Lock()
	n.f.wedged[node] = pid
	n.f.mu.Unlock()
	return nil
}

// stepping says whether node is in a rollout step, and which other nodes
// of group are. A read that fails counts node as in a step: the lenient
// side, since it keeps node out of N.
func (n *nemesis) stepping(group, node string) (bool, []string) {
	ws, err := n.c.listWorkloads(group)
	if err != nil {
		return true, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	gs, err := n.c.store().Read(ctx, group, nil)
	if err != nil {
		return true, nil
	}
	// A step shows in Docker as two containers, or none running under
	// the managed name; in Consul as a claim or a record mid-step.
	in := map[string]bool{}
	for nd, w := range ws {
		if len(w.IDs) > 1 || !w.Healthy {
			in[nd] = true
		}
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
		if nd != node && n.c.nodes[nd] == group && in[nd] {
			list = append(list, nd)
		}
	}
	sort.Strings(list)
	_, present := ws[node]
	return in[node] || !present, list
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

// healAll ends every fault still under way: the nemesis has stopped. It
// is also a cleanup of the run, so that no crash loop or frozen process
// outlives it.
func (n *nemesis) healAll() {
	n.f.mu.Lock()
	var ends []event
	for scheduled, node := range n.f.target {
		for kind, m := range map[string]bool{opStartAgent: n.f.agents[node], opResumeAgnt: n.f.paused[node],
			opReviveNode: n.f.nodes[node], opCrashEnd: n.f.crash[node] != nil, opUnwedge: n.f.wedged[node] != 0,
			opHeal: n.f.partitioned[node] != ""} {
			if m {
				ends = append(ends, event{kind: kind, node: scheduled})
			}
		}
	}
	n.f.mu.Unlock()
	sort.Slice(ends, func(i, j int) bool { return healOrder(ends[i].kind) < healOrder(ends[j].kind) })
	for _, e := range ends {
		n.step(e)
	}
	n.step(event{kind: opStartSrv})
	n.step(event{kind: opCheckPass})
	if n.c.reg != nil {
		n.c.reg.heal()
	}
}

// healOrder heals the network before the hosts, the hosts before agents.
func healOrder(kind string) int {
	return map[string]int{opHeal: 0, opReviveNode: 1, opUnwedge: 2, opCrashEnd: 2, opResumeAgnt: 3, opStartAgent: 3}[kind]
}
