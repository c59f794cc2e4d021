package coordinator

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/lockstep"
)

// StallAfter is how long a group with nodes waiting behind an open gate and
// every slot free may go without any record changing before status calls
// it stalled. Between one node's release and the next grant there are
// milliseconds, and an agent whose look failed tries again within
// the agent's retry pause (10 s); a minute of nothing is neither.
const StallAfter = time.Minute

// SlotUseReason says why a node uses one of max_parallel's slots.
type SlotUseReason string

// Values of SlotUseReason; they are part of `status -o json`.
const (
	// SlotHolding: the node's process holds the slot now.
	SlotHolding SlotUseReason = "holding"
	// SlotOrphaned: the node's process is gone mid-step; its claim counts
	// until the process is back, or until a node in line that saw it
	// orphaned for the claim's whole lease reports it lost.
	SlotOrphaned SlotUseReason = "orphaned_claim"
	// SlotUnavailable: Consul sees the node down (Store.Unavailable).
	SlotUnavailable SlotUseReason = "unavailable"
)

// SlotUser is one node that uses a slot.
type SlotUser struct {
	Node string
	Why  SlotUseReason
	// Until is, for an orphaned claim, the earliest it may be reported
	// lost (its lease from its grant, on its writer's clock); zero
	// otherwise.
	Until time.Time
}

// Budget is who uses max_parallel's slots, counted as the head of the line
// counts them (lockstep's budget, plus the nodes Consul sees down).
type Budget struct {
	Limit int        // K; 0 while the gate is closed
	Users []SlotUser // sorted by node; a node once, by its first reason above
}

// Full says no node may be granted a slot until one of Users is done.
func (b Budget) Full() bool { return b.Limit > 0 && len(b.Users) >= b.Limit }

// SlotBudget counts who uses the slots. h may be nil (no slot state read).
func SlotBudget(limit int, h *lockstep.Holders, unavailable []string) Budget {
	b := Budget{Limit: limit}
	seen := map[string]bool{}
	add := func(u SlotUser) {
		if !seen[u.Node] {
			seen[u.Node] = true
			b.Users = append(b.Users, u)
		}
	}
	if h != nil {
		for _, e := range h.Holding {
			add(SlotUser{Node: e.Name, Why: SlotHolding})
		}
		// Counted also names the claims of live holders, added above.
		for _, name := range h.Counted() {
			c, _ := h.ClaimOf(name)
			add(SlotUser{Node: name, Why: SlotOrphaned, Until: c.Until})
		}
	}
	for _, n := range unavailable {
		add(SlotUser{Node: n, Why: SlotUnavailable})
	}
	sort.Slice(b.Users, func(i, j int) bool { return b.Users[i].Node < b.Users[j].Node })
	return b
}

// StallCause is a likely reason, told from KV alone, that waiting nodes do
// not move.
type StallCause string

// Values of StallCause; they are part of `status -o json`.
const (
	// CauseHostDown: the node has no contender key and the host its agent
	// runs on is down (serfHealth critical).
	CauseHostDown StallCause = "host_down"
	// CauseAgentStopped: the node has no contender key and its agent
	// stopped cleanly and is not back (its record's stop mark).
	CauseAgentStopped StallCause = "agent_stopped"
	// CauseAgentDown: the node has no contender key (its process is not
	// in line: a key goes with its session) and Consul sees it down.
	CauseAgentDown StallCause = "agent_down"
	// CauseAwaitingCanaries: the node is no canary of an unpromoted canary
	// stage (update.canary), which holds it out of the line until
	// `rollagent promote`, or auto_promote's healthy time, lets it go: the
	// canaries have not all converged (one failed, is down, or is behind).
	CauseAwaitingCanaries StallCause = "awaiting_canaries"
	// CauseNotInLine: the node has no contender key though Consul does not
	// see it down: its agent stopped, left the catalog, or cannot reach
	// Consul; or the node left the group and its record stayed.
	CauseNotInLine StallCause = "not_in_line"
	// CauseNodeCheck: a check of the spec's update.block_on_node is not
	// passing on the node's own Consul node, which holds it until it does.
	CauseNodeCheck StallCause = "node_check"
	// CauseDomainFull: the node is in line and its domain
	// (update.max_parallel_per) is full: nodes of it are down (SpreadWaits).
	CauseDomainFull StallCause = "domain_full"
	// CauseBehindDomainFull: the node is in line, and the line, first come
	// first served, waits behind a node whose domain is full.
	CauseBehindDomainFull StallCause = "behind_domain_full"
	// CauseNotGranted: the node is in line and a slot is free, yet no grant
	// came: a bug in rollagent.
	CauseNotGranted StallCause = "not_granted"
)

// StallReason is one cause and the waiting nodes it applies to.
type StallReason struct {
	Cause StallCause
	Nodes []string // sorted
}

// Waiter is a node behind the desired SHA that is not moving, and since
// when: its record's time, or the commit if that is later, as no node can
// be expected to act on a commit before it was made.
type Waiter struct {
	Node  string
	Since time.Time
}

// Stall is the diagnosis of a group that does not move while it could.
type Stall struct {
	Waiting []Waiter // oldest first
	// Quiet is the latest change any record shows: a node's record, a
	// failure, the commit. Nothing has happened since.
	Quiet   time.Time
	Reasons []StallReason // in the order of the StallCause values
}

// StallInput is what Diagnose decides from: a GroupState's parts, with the
// nodes Consul sees down, at Now.
type StallInput struct {
	Gate        Verdict
	Desired     *Desired
	Nodes       []NodeState
	Failures    []Failure
	Holders     *lockstep.Holders
	Unavailable []string
	DownWhy     map[string]DownReason // why each of Unavailable is down
	// Lost are the nodes Summary no longer counts: none of them waits.
	Lost map[string]bool
	// NodeChecks are the nodes a check of update.block_on_node holds, or
	// that of update.last (GroupState.LastWaiters), with what holds each
	// (GateHealth.OnNodes, by the node's record).
	NodeChecks map[string]string
	// Stagger is the desired spec's update.stagger: a grant may wait that
	// long after a release that an agent saw later than the reader did,
	// so a group is quiet that much longer before it counts as stalled.
	Stagger time.Duration
	// Spread is the desired spec's update.max_parallel_per, and Domains
	// the nodes' domains (GroupState.Domains): a node in line whose domain
	// is full is held, not forgotten.
	Spread  *hashspec.Spread
	Domains map[string]string
	// Canaries are the canaries of an unpromoted canary stage of the
	// desired SHA, which holds every other node; nil when there is none.
	Canaries []string
	Now      time.Time
}

// StallInput gathers g's parts for Diagnose, with sum, g's Summary at now.
func (g *GroupState) StallInput(now time.Time, sum Summary) StallInput {
	in := StallInput{Gate: sum.Gate, Desired: g.Desired, Nodes: g.Nodes, Failures: g.Failures,
		Holders: g.Holders, Unavailable: g.Unavailable, DownWhy: g.DownWhy, Lost: sum.Lost(), NodeChecks: g.nodeChecks(), Now: now}
	if g.Spec != nil {
		in.Stagger = g.Spec.Update.Stagger.Std()
		in.Spread, in.Domains = g.Spec.Update.MaxParallelPer, g.Domains
	}
	if g.Canaries != nil && g.Promoted == nil && len(g.Canaries.Nodes) > 0 {
		in.Canaries = g.Canaries.Nodes
	}
	return in
}

// nodeChecks maps each node whose Consul node a check of block_on_node
// holds to the first such check.
func (g *GroupState) nodeChecks() map[string]string {
	waiters := g.LastWaiters()
	if (g.Health == nil || len(g.Health.OnNodes) == 0) && len(waiters) == 0 {
		return nil
	}
	out := map[string]string{}
	// A node that goes last (update.last) is held by its check too.
	for _, n := range waiters {
		out[n] = fmt.Sprintf("waits to go last (check %q passes on it)", g.Last.Check)
	}
	if g.Health == nil {
		return out
	}
	for _, n := range g.Nodes {
		if f := g.Health.OnNodes[n.ConsulNode]; n.ConsulNode != "" && len(f) > 0 {
			out[n.Node] = f[0].String()
		}
	}
	return out
}

// Diagnose returns why the group is stalled, or nil when it is not: when
// its gate is open, some node waits behind the desired SHA, no slot is used
// (no live holder, no claim that counts, no node Consul sees down filling
// K) and no record has changed for StallAfter. A rollout never stops in
// that state by design, so status must say so rather than look idle.
//
// A node's "replacing" or "verifying" record is not asked about: a node
// moves only under a slot, which the budget counts, so such a record
// without a slot is left over from a process that died and moves nothing.
func Diagnose(in StallInput) *Stall {
	if in.Gate.State == GateStagger {
		// The last rule, so every other is open. A reader counts the
		// stagger from its own first sight of the release, which for a
		// status that just started is now, however old the release: it
		// must not hide a stall. The quiet time below waits it out.
		in.Gate.Open, in.Gate.Limit = true, in.Gate.MaxParallel
	}
	if !in.Gate.Open || in.Desired == nil {
		return nil
	}
	waiting := waiters(in.Desired, in.Nodes, in.Lost)
	if len(waiting) == 0 {
		return nil
	}
	b := SlotBudget(in.Gate.Limit, in.Holders, in.Unavailable)
	if b.Full() || slices.ContainsFunc(b.Users, func(u SlotUser) bool { return u.Why != SlotUnavailable }) {
		return nil // something moves, or the budget line says who holds it
	}
	quiet := lastChange(in)
	if in.Now.Sub(quiet) <= StallAfter+in.Stagger {
		return nil
	}
	return &Stall{Waiting: waiting, Quiet: quiet, Reasons: stallReasons(waiting, in, domainFull(in, b, waiting))}
}

// domainFull are the waiting nodes whose domain b fills.
func domainFull(in StallInput, b Budget, waiting []Waiter) map[string]bool {
	names := make([]string, 0, len(waiting))
	for _, w := range waiting {
		names = append(names, w.Node)
	}
	full := map[string]bool{}
	for _, w := range SpreadWaits(in.Spread, b, in.Holders, in.Domains, names) {
		full[w.Node] = true
	}
	return full
}

// waiters are the nodes behind desired that wait: their record says so, or
// predates the commit, which an agent that is up would have acted on. A
// lost node is not waited for: it left.
func waiters(d *Desired, nodes []NodeState, lost map[string]bool) []Waiter {
	var out []Waiter
	for _, n := range nodes {
		if n.SHA == d.SHA || n.State == StateReplacing || n.State == StateVerifying || lost[n.Node] {
			continue
		}
		if n.State == StateWaiting || n.Since.Before(d.CommittedAt) {
			since := n.Since
			if since.Before(d.CommittedAt) {
				since = d.CommittedAt
			}
			out = append(out, Waiter{Node: n.Node, Since: since})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Since.Before(out[j].Since) })
	return out
}

// lastChange is the latest time any record of the group was written.
func lastChange(in StallInput) time.Time {
	last := in.Desired.CommittedAt
	later := func(t time.Time) {
		if t.After(last) {
			last = t
		}
	}
	for _, n := range in.Nodes {
		later(n.Since)
	}
	for _, f := range in.Failures {
		later(f.At)
	}
	if in.Holders != nil {
		for _, c := range in.Holders.Claims {
			later(c.Since)
		}
	}
	return last
}

// stallReasons sorts the waiting nodes by what the slot's keys and Consul's
// health say of their agents.
func stallReasons(waiting []Waiter, in StallInput, full map[string]bool) []StallReason {
	h, unavailable, why, checks := in.Holders, in.Unavailable, in.DownWhy, in.NodeChecks
	inLine := map[string]bool{}
	if h != nil {
		for _, name := range h.Names() {
			inLine[name] = true
		}
	}
	byCause := map[StallCause][]string{}
	for _, w := range waiting {
		cause := CauseNotGranted
		switch {
		case !inLine[w.Node] && why[w.Node] == DownHost:
			cause = CauseHostDown
		case !inLine[w.Node] && why[w.Node] == DownAgentStopped:
			cause = CauseAgentStopped
		case !inLine[w.Node] && slices.Contains(unavailable, w.Node):
			cause = CauseAgentDown
		case !inLine[w.Node] && checks[w.Node] != "":
			cause = CauseNodeCheck
		case !inLine[w.Node] && len(in.Canaries) > 0 && !slices.Contains(in.Canaries, w.Node):
			cause = CauseAwaitingCanaries
		case !inLine[w.Node]:
			cause = CauseNotInLine
		case full[w.Node]:
			cause = CauseDomainFull
		case len(full) > 0:
			cause = CauseBehindDomainFull
		}
		byCause[cause] = append(byCause[cause], w.Node)
	}
	var out []StallReason
	for _, c := range []StallCause{CauseHostDown, CauseAgentStopped, CauseAgentDown, CauseNodeCheck, CauseAwaitingCanaries, CauseNotInLine, CauseDomainFull, CauseBehindDomainFull, CauseNotGranted} {
		if nodes := byCause[c]; len(nodes) > 0 {
			sort.Strings(nodes)
			out = append(out, StallReason{Cause: c, Nodes: nodes})
		}
	}
	return out
}
