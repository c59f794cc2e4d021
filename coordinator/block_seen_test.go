package coordinator

import (
	"testing"
	"time"

	"github.com/rollagent/rollagent/hashspec"
)

// An agent's sightings keep the since of a check its earlier looks saw not
// passing, start one a look first sees at that look, drop one that passes,
// and keep all when the look could not read the health.
func TestSeenBlocks(t *testing.T) {
	t0 := time.Date(2026, 6, 2, 1, 0, 0, 0, time.UTC)
	now := t0.Add(time.Minute)
	lag := BlockFailure{Block: hashspec.Block{Check: "replication-lag"}, Check: "replication-lag", CheckID: "lag", Status: "critical", Node: "db2"}
	disk := BlockFailure{Block: hashspec.Block{Check: "disk"}, Check: "disk", CheckID: "disk", Status: "warning", Node: "h1"}
	seenLag := BlockSeen{Node: "db2", CheckID: "lag", Since: t0}
	for _, tc := range []struct {
		name   string
		prev   []BlockSeen
		health *GateHealth
		want   []BlockSeen
	}{
		{"no blocks", []BlockSeen{seenLag}, nil, nil},
		{"first seen now", nil, &GateHealth{Failing: []BlockFailure{lag}}, []BlockSeen{{Node: "db2", CheckID: "lag", Since: now}}},
		{"still failing keeps its since", []BlockSeen{seenLag}, &GateHealth{Failing: []BlockFailure{lag, disk}},
			[]BlockSeen{seenLag, {Node: "h1", CheckID: "disk", Since: now}}},
		{"passed is dropped", []BlockSeen{seenLag}, &GateHealth{Failing: []BlockFailure{disk}}, []BlockSeen{{Node: "h1", CheckID: "disk", Since: now}}},
		{"all passing", []BlockSeen{seenLag}, &GateHealth{}, nil},
		{"unread keeps what was seen", []BlockSeen{seenLag}, &GateHealth{Err: "connection refused"}, []BlockSeen{seenLag}},
		{"a check two blocks match once", nil, &GateHealth{Failing: []BlockFailure{lag, lag}}, []BlockSeen{{Node: "db2", CheckID: "lag", Since: now}}},
		{"a block no check matches is no sighting", nil, &GateHealth{Failing: []BlockFailure{{Block: hashspec.Block{Check: "nope"}}}}, nil},
		{"the same check on another node is another", []BlockSeen{{Node: "db1", CheckID: "lag", Since: t0}}, &GateHealth{Failing: []BlockFailure{lag}},
			[]BlockSeen{{Node: "db2", CheckID: "lag", Since: now}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := SeenBlocks(tc.prev, tc.health, now); !sameSeen(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// A reader of the group gives each failing check the earliest since the
// records hold for it (its node and ID), and none when no record does; the
// reason says it.
func TestSeenSince(t *testing.T) {
	t0 := time.Date(2026, 6, 2, 1, 0, 0, 0, time.UTC)
	lag := BlockFailure{Block: hashspec.Block{Check: "replication-lag"}, Check: "replication-lag", CheckID: "lag", Status: "critical", Node: "db2", Service: "postgres"}
	other := lag
	other.Node = "db3"
	nodes := []NodeState{
		{Node: "n1", Blocked: []BlockSeen{{Node: "db2", CheckID: "lag", Since: t0.Add(5 * time.Second)}}},
		{Node: "n2", Blocked: []BlockSeen{{Node: "db2", CheckID: "lag", Since: t0}, {Node: "db3", CheckID: "other", Since: t0}}},
		{Node: "n3"},
	}
	h := &GateHealth{Failing: []BlockFailure{lag, other}, OnNodes: map[string][]BlockFailure{"db2": {lag}}}
	h.seenSince(nodes)
	if !h.Failing[0].Since.Equal(t0) || !h.OnNodes["db2"][0].Since.Equal(t0) {
		t.Errorf("since %s and %s, want the earliest record's, %s", h.Failing[0].Since, h.OnNodes["db2"][0].Since, t0)
	}
	if !h.Failing[1].Since.IsZero() {
		t.Errorf("db3's check: since %s, want none (no record saw it)", h.Failing[1].Since)
	}
	want := `blocked by Consul check "replication-lag" (critical) on node db2, service postgres, since 2026-06-02T01:00:00Z`
	if got := h.Failing[0].String(); got != want {
		t.Errorf("reason %q, want %q", got, want)
	}
}

// review 941161d: a record its agent no longer updates (a clean stop)
// keeps the sightings it had; a check that passed and failed again since
// is said to fail since the stopped agent's first sight, not the live
// agents'. A reader takes the since of records whose agents still look.
func TestSeenSinceLeavesAStoppedAgentsSightingOut(t *testing.T) {
	t0 := time.Date(2026, 6, 2, 1, 0, 0, 0, time.UTC)
	again := t0.Add(3 * time.Hour) // the check passed, then failed again
	stopped := t0.Add(time.Hour)
	lag := BlockFailure{Block: hashspec.Block{Check: "replication-lag"}, Check: "replication-lag", CheckID: "lag", Status: "critical", Node: "db2"}
	nodes := []NodeState{
		{Node: "n1", Gate: GateBlockedByCheck, Stopped: &stopped, Blocked: []BlockSeen{{Node: "db2", CheckID: "lag", Since: t0}}},
		{Node: "n2", Gate: GateBlockedByCheck, Blocked: []BlockSeen{{Node: "db2", CheckID: "lag", Since: again}}},
	}
	h := &GateHealth{Failing: []BlockFailure{lag}}
	h.seenSince(nodes)
	if !h.Failing[0].Since.Equal(again) {
		t.Errorf("since %s, want %s: n1's agent stopped at %s and saw nothing since", h.Failing[0].Since, again, stopped)
	}
}
