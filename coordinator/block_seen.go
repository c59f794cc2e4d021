package coordinator

import (
	"slices"
	"time"
)

// BlockSeen is a Consul check an agent saw not passing at its looks while
// its gate was blocked_by_check, and since when: the first look of a run
// of looks that each saw it not passing (on the agent's clock, UTC). An
// agent restarted takes the sightings over from its record, so a check
// that passed and failed again while the agent was down is not seen to.
// Consul keeps no time of a check's last change (its ModifyIndex moves
// with its output too), hence the agents' sight.
type BlockSeen struct {
	Node    string    `json:"node"` // the Consul node the check runs on
	CheckID string    `json:"check_id"`
	Since   time.Time `json:"since"`
}

func sameSeen(a, b []BlockSeen) bool {
	return slices.EqualFunc(a, b, func(x, y BlockSeen) bool {
		return x.Node == y.Node && x.CheckID == y.CheckID && x.Since.Equal(y.Since)
	})
}

// SeenBlocks are the sightings of an agent's look at now, which read h,
// after those of its earlier looks (prev): each check h finds not passing,
// since prev saw it, else since now. A look that could not read the health
// keeps prev: it saw nothing pass.
func SeenBlocks(prev []BlockSeen, h *GateHealth, now time.Time) []BlockSeen {
	if h == nil {
		return nil
	}
	if h.Err != "" {
		return prev
	}
	var out []BlockSeen
	for _, f := range h.Failing {
		if f.CheckID == "" || seenAt(out, f.Node, f.CheckID) >= 0 {
			continue
		}
		s := BlockSeen{Node: f.Node, CheckID: f.CheckID, Since: now.UTC()}
		if i := seenAt(prev, f.Node, f.CheckID); i >= 0 {
			s.Since = prev[i].Since
		}
		out = append(out, s)
	}
	return out
}

func seenAt(seen []BlockSeen, node, checkID string) int {
	return slices.IndexFunc(seen, func(s BlockSeen) bool { return s.Node == node && s.CheckID == checkID })
}

// seenSince fills the Since of each failing check of h, the group's and
// each node's, from the sightings of the records of nodes: the earliest,
// of the records whose agents did not stop (a stopped agent's record
// keeps what it saw until it stopped, not whether the check passed since).
func (h *GateHealth) seenSince(nodes []NodeState) {
	if h == nil {
		return
	}
	fill := func(fs []BlockFailure) {
		for i := range fs {
			fs[i].Since = earliestSeen(nodes, fs[i].Node, fs[i].CheckID)
		}
	}
	fill(h.Failing)
	for _, fs := range h.OnNodes {
		fill(fs)
	}
}

func earliestSeen(nodes []NodeState, node, checkID string) time.Time {
	var at time.Time
	if checkID == "" {
		return at
	}
	for _, n := range nodes {
		if n.Stopped != nil {
			continue // its agent looks no more: what it saw may have passed since
		}
		if i := seenAt(n.Blocked, node, checkID); i >= 0 && (at.IsZero() || n.Blocked[i].Since.Before(at)) {
			at = n.Blocked[i].Since
		}
	}
	return at
}
