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
	group  string        // control operations
	node   string        // node faults
	action string        // commits: failure_action
	maxF   int           // commits: max_failures
	stall  time.Duration // commit-slowpull: how long the registry stalls its pulls
	// Commits: update.canary (0 for none), auto_promote, and the group
	// its update.after names ("" for none).
	canary int
	auto   bool
	after  string
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
	if e.stall > 0 {
		s += fmt.Sprintf(" (registry stalls %s)", e.stall)
	}
	if e.canary > 0 {
		s += fmt.Sprintf(" (canary=%d auto_promote=%v)", e.canary, e.auto)
	}
	if e.after != "" {
		s += fmt.Sprintf(" (after %s)", e.after)
	}
	return s
}

// Kinds of event. A fault's end is an event of its own, so that faults
// overlap: at most maxFaults at once, never two on one node, one server
// down at a time.
const (
	opCommit     = "commit"
	opCommitBad  = "commit-bad"
	opCommitSlow = "commit-slow"     // a good release slow to turn healthy: a long verify inside the hold
	opCommitTypo = "commit-typo"     // an image that is nowhere: every node's prepare fails, no failure counted
	opCommitPull = "commit-slowpull" // a good release in a registry that stalls its pulls (nemesis_registry_test.go)
	opCancel     = "cancel"
	opRollback   = "rollback"
	opResume     = "resume"
	opPause      = "pause"      // rollagent pause: an operator's brake on the desired SHA
	opPromote    = "promote"    // rollagent promote: the desired SHA's canaries promoted
	opCheckFail  = "check-fail" // the Consul check every commit blocks on goes critical
	opCheckPass  = "check-pass"
	opKillAgent  = "kill-agent" // SIGKILL, a crash of the agent alone
	opTermAgent  = "term-agent" // SIGTERM, a clean stop (systemctl stop), of a holder if there is one
	opStartAgent = "start-agent"
	opPauseAgent = "pause-agent" // the agent frozen (SIGSTOP, a frozen VM) past its lease, a holder if any
	opBlipAgent  = "blip-agent"  // the agent frozen past its session's TTL, within its lease, a holder if any (issue 25, item 4)
	opResumeAgnt = "unpause-agent"
	opKillNode   = "kill-node" // a host losing power
	opReboot     = "reboot"    // the agent stopped cleanly, then its host down
	opReviveNode = "revive-node"
	opCrash      = "crash-workload" // the workload's process killed again and again: a crash loop
	opCrashEnd   = "crash-end"
	opWedge      = "wedge-workload" // the workload's process frozen: running, and unhealthy by its probes
	opUnwedge    = "unwedge-workload"
	opPartition  = "partition"
	opHeal       = "heal"
	opKillLeader = "kill-leader"
	opStartSrv   = "start-server"
	maxFaults    = 2
)

// agentLease is the lease of the claim of a node whose process stopped
// answering (agent.lease): all one hold may run with the Docker runtime,
// its step bound (30s), twice the healthy_deadline of every nemesis spec
// (testHealthyDeadline), the pull's bound under a slot (2m) and the
// agent's 30s of grace. A pause-agent lasts longer, so it outlasts the
// lease only in runs longer than the 3 minutes test-integration gives.
const agentLease = 30*time.Second + 2*testHealthyDeadline + 2*time.Minute + 30*time.Second

// ends pairs each kind of fault with the event that ends it.
var ends = map[string]string{
	opKillAgent: opStartAgent, opTermAgent: opStartAgent, opPauseAgent: opResumeAgnt, opBlipAgent: opResumeAgnt, opKillNode: opReviveNode,
	opReboot: opReviveNode, opCrash: opCrashEnd, opWedge: opUnwedge, opPartition: opHeal, opKillLeader: opStartSrv,
	opCheckFail: opCheckPass,
}

// gateTarget is what a check flip holds: one flip at a time. A flip is no
// fault of a node's, so it does not count against maxFaults.
const gateTarget = "gate check"

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
	kinds := []string{opCommit, opCommit, opCommit, opCommitBad, opCommitBad, opCommitSlow, opCommitTypo, opCommitPull,
		opCancel, opCancel, opRollback, opResume, opResume, opPause, opPause, opPromote, opPromote, opPromote, opCheckFail, opCheckFail,
		opKillAgent, opTermAgent, opTermAgent, opPauseAgent, opBlipAgent, opKillNode, opKillNode, opReboot, opReboot,
		opCrash, opCrash, opWedge, opWedge, opPartition, opKillLeader}
	kind := kinds[p.rng.IntN(len(kinds))]
	g := p.groups[p.rng.IntN(len(p.groups))]
	action := []string{"pause", "rollback"}[p.rng.IntN(2)]
	switch kind {
	case opCommit, opCommitBad, opCommitSlow:
		p.out = append(p.out, p.order(event{at: at, kind: kind, group: g, action: action, maxF: 1 + p.rng.IntN(2)}))
	case opCommitPull:
		p.out = append(p.out, p.order(event{at: at, kind: kind, group: g, action: action, maxF: 1 + p.rng.IntN(2), stall: p.stallFor()}))
	case opCommitTypo:
		// A bad release with failure_action=rollback soon after: where
		// the rollback goes is the point (issue 25, item 8).
		p.out = append(p.out, event{at: at, kind: kind, group: g, action: action, maxF: 1},
			event{at: at + p.between(3, 6), kind: opCommitBad, group: g, action: "rollback", maxF: 1})
	case opCancel, opRollback, opResume, opPause, opPromote:
		p.out = append(p.out, event{at: at, kind: kind, group: g})
	case opCheckFail:
		p.flip(at, d, p.between(3, 25))
	case opKillAgent, opTermAgent:
		p.fault(at, d, kind, p.between(2, 15))
	case opPauseAgent:
		p.fault(at, d, kind, agentLease+p.between(5, 20))
	case opBlipAgent:
		// The session ends 3-4 s in (the alive check: three failed runs
		// a second apart); the claim, alive, must not.
		p.fault(at, d, kind, p.between(6, 12))
	case opKillNode, opReboot:
		// Up to 55s: some outages outlast the lease of a holder that
		// dies with its node, and every retry budget.
		p.fault(at, d, kind, p.between(5, 55))
	case opCrash:
		p.fault(at, d, kind, p.between(10, 40))
	case opWedge:
		// Docker calls it unhealthy only after its retries of a 5s probe.
		p.fault(at, d, kind, p.between(25, 55))
	case opPartition:
		p.fault(at, d, kind, p.between(4, 30))
	case opKillLeader:
		p.fault(at, d, kind, p.between(3, 25))
	}
}

// order draws how a commit moves: a third of them with a canary, half of
// those promoted by themselves after canaryHealthy (the rest wait for a
// promote event, or the heal's); half of the second group's with
// update.after naming the first. Only the second names the first, so no
// commit makes a cycle.
func (p *planner) order(e event) event {
	if p.rng.IntN(3) == 0 {
		e.canary, e.auto = 1, p.rng.IntN(2) == 0
	}
	if len(p.groups) > 1 && e.group == p.groups[1] && p.rng.IntN(2) == 0 {
		e.after = p.groups[0]
	}
	return e
}

// flip adds a flip of the gate check to critical and its flip back, if
// none is under way at at.
func (p *planner) flip(at, d, dur time.Duration) {
	if p.busy[gateTarget] > at {
		return
	}
	stop := min(at+dur, d)
	p.busy[gateTarget] = stop
	p.out = append(p.out, event{at: at, kind: opCheckFail}, event{at: stop, kind: opCheckPass})
}

// fault adds a fault and its end, if a target is free and fewer than
// maxFaults are under way at at.
func (p *planner) fault(at, d time.Duration, kind string, dur time.Duration) {
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
	p.out = append(p.out, event{at: at, kind: kind, node: node}, event{at: stop, kind: ends[kind], node: node})
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
	if (kind == opKillAgent || kind == opTermAgent) && p.lastFree != "" && p.busy[p.lastFree] <= at && p.rng.IntN(2) == 0 {
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
