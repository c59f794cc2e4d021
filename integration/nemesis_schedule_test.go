package integration

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"time"
)

// event is one operation of the nemesis at an offset from its start. The
// schedule is drawn from the seed alone, so a seed replays the same
// operations in the same order; what they meet depends on timing.
type event struct {
	at     time.Duration
	kind   string
	group  string // control operations
	node   string // node faults
	action string // commits: failure_action
	maxF   int    // commits: max_failures
}

func (e event) String() string {
	s := fmt.Sprintf("+%5.1fs %s", e.at.Seconds(), e.kind)
	switch {
	case e.node != "":
		s += " " + e.node
	case e.group != "":
		s += " " + e.group
	}
	if e.action != "" {
		s += fmt.Sprintf(" (failure_action=%s max_failures=%d)", e.action, e.maxF)
	}
	return s
}

// Kinds of event. A fault's end is an event of its own, so that faults
// overlap: at most maxFaults at once, never two on one node, one server
// down at a time.
const (
	opCommit     = "commit"
	opCommitBad  = "commit-bad"
	opCancel     = "cancel"
	opRollback   = "rollback"
	opResume     = "resume"
	opKillAgent  = "kill-agent"
	opStartAgent = "start-agent"
	opKillNode   = "kill-node"
	opReviveNode = "revive-node"
	opPartition  = "partition"
	opHeal       = "heal"
	opKillLeader = "kill-leader"
	opStartSrv   = "start-server"
	maxFaults    = 2
)

// planner draws the schedule, tracking which targets a fault holds.
type planner struct {
	rng      *rand.Rand
	groups   []string
	nodes    []string
	busy     map[string]time.Duration // node or "server" -> end of its fault
	lastFree string                   // the node whose fault ended last: a crash during its recovery
	ends     []time.Duration
	out      []event
}

// schedule draws events for d, one every 3-8s, and the ends of the faults
// they start. The weights favour commits and node faults, the two whose
// overlap the guarantee is about.
func schedule(seed uint64, d time.Duration, groups, nodes []string) []event {
	p := &planner{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), groups: groups, nodes: nodes,
		busy: map[string]time.Duration{}}
	for at := 2 * time.Second; at < d; at += p.between(3, 8) {
		p.draw(at, d)
	}
	sort.SliceStable(p.out, func(i, j int) bool { return p.out[i].at < p.out[j].at })
	return p.out
}

func (p *planner) between(lo, hi int) time.Duration {
	return time.Duration(lo*1000+p.rng.IntN((hi-lo)*1000)) * time.Millisecond
}

func (p *planner) draw(at, d time.Duration) {
	kinds := []string{opCommit, opCommit, opCommit, opCommitBad, opCommitBad, opCancel, opRollback, opResume, opResume,
		opKillAgent, opKillAgent, opKillNode, opKillNode, opKillNode, opPartition, opKillLeader}
	kind := kinds[p.rng.IntN(len(kinds))]
	g := p.groups[p.rng.IntN(len(p.groups))]
	switch kind {
	case opCommit, opCommitBad:
		action := []string{"pause", "rollback"}[p.rng.IntN(2)]
		p.out = append(p.out, event{at: at, kind: kind, group: g, action: action, maxF: 1 + p.rng.IntN(2)})
	case opCancel, opRollback, opResume:
		p.out = append(p.out, event{at: at, kind: kind, group: g})
	case opKillAgent:
		p.fault(at, d, kind, opStartAgent, p.between(0, 12))
	case opKillNode:
		// Up to 55s: some outages outlast the lease (healthy_deadline 30s
		// plus grace) and every retry budget.
		p.fault(at, d, kind, opReviveNode, p.between(5, 55))
	case opPartition:
		p.fault(at, d, kind, opHeal, p.between(4, 30))
	case opKillLeader:
		p.fault(at, d, kind, opStartSrv, p.between(3, 25))
	}
}

// fault adds a fault and its end, if a target is free and fewer than
// maxFaults are under way at at.
func (p *planner) fault(at, d time.Duration, kind, end string, dur time.Duration) {
	live := 0
	for _, e := range p.ends {
		if e > at {
			live++
		}
	}
	if live >= maxFaults {
		return
	}
	target := p.target(at, kind)
	if target == "" {
		return
	}
	stop := min(at+dur, d)
	p.busy[target] = stop
	p.ends = append(p.ends, stop)
	node := target
	if kind == opKillLeader {
		node = ""
	}
	p.out = append(p.out, event{at: at, kind: kind, node: node}, event{at: stop, kind: end, node: node})
	if node != "" {
		p.lastFree = node
	}
}

// target picks a free node (or the server slot for a leader kill). An
// agent kill picks, half the time, the node whose fault ended last, which
// may still be recovering.
func (p *planner) target(at time.Duration, kind string) string {
	if kind == opKillLeader {
		if p.busy["server"] > at {
			return ""
		}
		return "server"
	}
	if kind == opKillAgent && p.lastFree != "" && p.busy[p.lastFree] <= at && p.rng.IntN(2) == 0 {
		return p.lastFree
	}
	var free []string
	for _, n := range p.nodes {
		if p.busy[n] <= at {
			free = append(free, n)
		}
	}
	if len(free) == 0 {
		return ""
	}
	return free[p.rng.IntN(len(free))]
}
