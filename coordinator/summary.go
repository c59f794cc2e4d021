package coordinator

import (
	"time"

	"github.com/rollagent/rollagent/lockstep"
)

// DefaultLostAfter is how long a node gone from Consul's catalog still
// counts toward progress, from the last sign of its agent: its record's
// last change or, written just before it deregisters, its clean stop. An
// agent that restarts (an upgrade, a reboot) deregisters and registers
// again within a minute; a node still gone after this has left.
const DefaultLostAfter = 10 * time.Minute

// Standing is how status counts one node: every row has exactly one, so
// that the counts add up to the rows. Most are the state its agent
// published; behind, lost and invalid are status's own, never published
// (NodeStatus.Valid refuses them).
type Standing string

// Values of Standing; they are part of `status -o json`.
const (
	StandingConverged Standing = "converged" // runs the desired SHA, healthy
	StandingReplacing Standing = "replacing"
	StandingVerifying Standing = "verifying"
	StandingWaiting   Standing = "waiting"
	StandingPaused    Standing = "paused"
	StandingCancelled Standing = "cancelled"
	StandingFailed    Standing = "failed"
	StandingUnknown   Standing = "unknown" // its agent could not read its workload
	// StandingDown: its workload went down after it converged; it counts
	// against max_parallel until it is healthy again.
	StandingDown Standing = "down"
	// StandingBehind: converged on another SHA than the desired one (or on
	// none), with nothing under way: its agent has not taken the commit up.
	StandingBehind Standing = "behind"
	// StandingLost: gone from Consul's catalog for longer than the grace;
	// it no longer counts toward progress.
	StandingLost Standing = "lost"
	// StandingInvalid: its record does not decode; it counts, and is never
	// converged, until fixed or removed.
	StandingInvalid Standing = "invalid"
)

// Standings lists every Standing in the order status prints them.
var Standings = []Standing{StandingConverged, StandingReplacing, StandingVerifying, StandingWaiting,
	StandingPaused, StandingCancelled, StandingFailed, StandingUnknown, StandingDown, StandingBehind, StandingLost, StandingInvalid}

// Presence is what Consul's catalog says of a node's service instance.
type Presence string

// Values of Presence; they are part of `status -o json`.
const (
	PresenceRegistered Presence = "registered"
	PresenceGone       Presence = "gone"    // no instance of the group's service
	PresenceUnknown    Presence = "unknown" // the catalog was not read
)

// Row is one node as status shows it.
type Row struct {
	Node     string
	Record   *NodeState // nil when the record is invalid
	Standing Standing
	Presence Presence
	Counts   bool   // toward progress: every row but a lost one
	Problem  string // why the record is invalid
}

// Summary is the honest count of a group: every row in exactly one
// standing, and done only when nothing is left to do.
type Summary struct {
	Gate    Verdict
	Rows    []Row            // valid records first, each list by name
	ByState map[Standing]int // every Standing, 0 when none
	Counted int              // rows that count toward progress
	Done    bool             // see Summarize
	Slots   int              // nodes that use a slot now (lockstep's count)
}

// SummaryInput is what Summarize decides from.
type SummaryInput struct {
	Gate       Verdict
	Desired    *Desired
	Nodes      []NodeState
	Invalid    []InvalidNode
	Failures   []Failure       // of the desired SHA
	Registered map[string]bool // nil: not known, no node is gone
	Holders    *lockstep.Holders
	// Down says why Consul's state counts nodes down (Store.Down), nil
	// when not asked: a node converged whose workload is down there is
	// down, before its agent's next look says so.
	Down      map[string]DownReason
	LostAfter time.Duration
	Now       time.Time
}

// Summary gathers g's parts for Summarize.
func (g *GroupState) Summary(now time.Time, lostAfter time.Duration) Summary {
	return Summarize(SummaryInput{Gate: Evaluate(GateInput{Group: g, Now: now, Mono: time.Now()}), Desired: g.Desired, Nodes: g.Nodes, Invalid: g.Invalid,
		Failures: g.Failures, Registered: g.Registered, Holders: g.Holders, Down: g.DownWhy, LostAfter: lostAfter, Now: now})
}

// Summarize counts every node. A node with a failure record of the desired
// SHA that has not converged on it counts as failed, whatever it published
// since (paused, once the failure closed the gate). A node whose service
// instance is gone from the catalog still counts until LostAfter past the
// last sign of its agent (its record's since, or its clean stop), then is
// lost. Done means every node that counts runs the desired SHA
// converged, the gate is open and no node uses a slot (no live holder, no
// claim that counts): a node stuck unknown or invalid keeps it false.
func Summarize(in SummaryInput) Summary {
	s := Summary{Gate: in.Gate, ByState: make(map[Standing]int, len(Standings))}
	for _, st := range Standings {
		s.ByState[st] = 0
	}
	failed := map[string]bool{}
	for _, f := range in.Failures {
		failed[f.Node] = true
	}
	for i := range in.Nodes {
		n := &in.Nodes[i]
		r := Row{Node: n.Node, Record: n, Presence: presence(in.Registered, n.Node)}
		r.Standing = standing(in.Desired, n)
		// Once a failure pauses the group, the node that failed says
		// "paused" like every other: its failure record tells it apart.
		if failed[n.Node] && r.Standing != StandingConverged {
			r.Standing = StandingFailed
		}
		if r.Standing == StandingConverged && in.Down[n.Node] == DownWorkload {
			r.Standing = StandingDown
		}
		if r.Presence == PresenceGone && in.Now.Sub(n.LastSign()) > in.LostAfter {
			r.Standing = StandingLost
		}
		s.add(r)
	}
	for _, bad := range in.Invalid {
		s.add(Row{Node: bad.Node, Standing: StandingInvalid, Presence: presence(in.Registered, bad.Node), Problem: bad.Error})
	}
	if in.Holders != nil {
		s.Slots = len(in.Holders.Counted())
	}
	s.Done = in.Desired != nil && in.Gate.Open && s.Counted > 0 &&
		s.ByState[StandingConverged] == s.Counted && s.Slots == 0
	return s
}

func (s *Summary) add(r Row) {
	r.Counts = r.Standing != StandingLost
	if r.Counts {
		s.Counted++
	}
	s.ByState[r.Standing]++
	s.Rows = append(s.Rows, r)
}

func presence(registered map[string]bool, node string) Presence {
	switch {
	case registered == nil:
		return PresenceUnknown
	case registered[node]:
		return PresenceRegistered
	}
	return PresenceGone
}

// published maps the states agents publish, but converged, to theirs.
var published = map[NodeStatus]Standing{StateReplacing: StandingReplacing, StateVerifying: StandingVerifying,
	StateWaiting: StandingWaiting, StatePaused: StandingPaused, StateCancelled: StandingCancelled,
	StateFailed: StandingFailed, StateUnknown: StandingUnknown, StateDown: StandingDown}

// standing is where a valid record puts its node, before the catalog is
// asked.
func standing(d *Desired, n *NodeState) Standing {
	if n.State == StateConverged {
		if d != nil && n.SHA == d.SHA {
			return StandingConverged
		}
		return StandingBehind
	}
	if st, ok := published[n.State]; ok {
		return st
	}
	return StandingUnknown
}

// Left counts the nodes that count and have not converged: moving, those
// a rollout moves on (replacing, verifying, waiting, behind), and stuck,
// those no pace will move (unknown, down, failed, invalid, paused, cancelled).
// With any stuck, an ETA would count down to a moment when nothing happens.
func (s Summary) Left() (moving, stuck int) {
	for _, r := range s.Rows {
		switch {
		case !r.Counts || r.Standing == StandingConverged:
		case r.Standing == StandingReplacing, r.Standing == StandingVerifying,
			r.Standing == StandingWaiting, r.Standing == StandingBehind:
			moving++
		default:
			stuck++
		}
	}
	return moving, stuck
}

// Lost lists the rows that no longer count.
func (s Summary) Lost() map[string]bool {
	lost := map[string]bool{}
	for _, r := range s.Rows {
		if !r.Counts {
			lost[r.Node] = true
		}
	}
	return lost
}
