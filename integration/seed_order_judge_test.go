package integration

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// orderFacts is what the seed's order is judged on, gathered from Consul
// (the grants and node records the watch saw, by their indexes) and from
// Docker (its reads of the workloads and the containers' Created times).
type orderFacts struct {
	mgrs, wkrs        string // the group names
	managers, workers []string
	leader            string // the manager the leader check passed on
	// converged is, per manager, the Consul index of the first record
	// the watch saw converged on the managers' new SHA; absent: never.
	converged map[string]uint64
	grants    []*grantSeen // every grant of either group after the commits
	// From Docker, per manager: notYet is when the last read began that
	// did not show it running the new SHA alone and healthy, before up,
	// the end of the first read that did. The manager became healthy on
	// it in between.
	notYet, up map[string]time.Time
	// created is, per node, Docker's Created time of its first container
	// of its group's new SHA.
	created map[string]time.Time
}

// judgeOrder checks the seed's order: no worker granted before the last
// manager converged, and the leader's node granted only after every other
// manager converged; from Consul's indexes exactly (a grant's index is its
// transaction's, a record's the write's), and from Docker within one read:
// a container created before a read that still showed a manager not
// running the new SHA healthy is a violation, one created between that
// read and the one that showed it is only noted.
func judgeOrder(f orderFacts) (violations, notes []string) {
	bad := func(format string, a ...any) { violations = append(violations, fmt.Sprintf(format, a...)) }
	var last uint64
	for _, m := range f.managers {
		idx, ok := f.converged[m]
		if !ok {
			bad("manager %s was never seen converged on the new SHA", m)
		}
		last = max(last, idx)
	}
	for _, g := range f.grants {
		switch {
		case g.group == f.wkrs && g.index <= last:
			bad("worker %s granted at index %d, before the last manager converged at index %d", g.node, g.index, last)
		case g.group == f.mgrs && g.node == f.leader:
			for _, m := range f.managers {
				if idx, ok := f.converged[m]; m != f.leader && ok && g.index <= idx {
					bad("leader %s granted at index %d, before manager %s converged at index %d", g.node, g.index, m, idx)
				}
			}
		}
	}
	judge := func(node, what string, ms []string) {
		at, ok := f.created[node]
		if !ok {
			return
		}
		for _, m := range ms {
			switch {
			case m == node:
			case at.Before(f.notYet[m]):
				bad("Docker created %s %s's container at %s, before a read at %s showed manager %s not yet on the new SHA",
					what, node, at.Format(time.StampMicro), f.notYet[m].Format(time.StampMicro), m)
			case f.up[m].IsZero() || at.Before(f.up[m]):
				notes = append(notes, fmt.Sprintf("Docker created %s %s's container within the read that first showed %s on the new SHA", what, node, m))
			}
		}
	}
	for _, w := range f.workers {
		judge(w, "worker", f.managers)
	}
	judge(f.leader, "leader", f.managers)
	if !slices.Contains(f.managers, f.leader) {
		bad("the leader %q is no manager", f.leader)
	}
	return violations, notes
}

func TestJudgeOrder(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	good := func() orderFacts {
		return orderFacts{mgrs: "m", wkrs: "w", managers: []string{"m1", "m2", "m3"}, workers: []string{"w1"}, leader: "m2",
			converged: map[string]uint64{"m1": 10, "m3": 20, "m2": 30},
			grants: []*grantSeen{{group: "m", node: "m1", index: 5}, {group: "m", node: "m3", index: 15},
				{group: "m", node: "m2", index: 25}, {group: "w", node: "w1", index: 35}},
			notYet:  map[string]time.Time{"m1": at(1), "m3": at(3), "m2": at(5)},
			up:      map[string]time.Time{"m1": at(2), "m3": at(4), "m2": at(6)},
			created: map[string]time.Time{"m2": at(4).Add(time.Millisecond), "w1": at(7)},
		}
	}
	for _, tc := range []struct {
		name       string
		edit       func(*orderFacts)
		bad, noted int
	}{
		{"in order", func(*orderFacts) {}, 0, 0},
		{"worker granted before the last manager converged", func(f *orderFacts) { f.grants[3].index = 29 }, 1, 0},
		{"leader granted before another converged", func(f *orderFacts) { f.grants[2].index = 18 }, 1, 0},
		{"a grant of a manager that is not the leader is not ordered", func(f *orderFacts) { f.grants[1].index = 1 }, 0, 0},
		{"a manager never converged", func(f *orderFacts) { delete(f.converged, "m3") }, 1, 0},
		{"Docker: a worker's container before a manager was up", func(f *orderFacts) { f.created["w1"] = at(4) }, 1, 0},
		{"Docker: a worker's container within the read", func(f *orderFacts) { f.created["w1"] = at(5).Add(time.Millisecond) }, 0, 1},
		{"Docker: the leader's container before another was up", func(f *orderFacts) { f.created["m2"] = at(2) }, 1, 0},
		{"the leader is no manager", func(f *orderFacts) { f.leader = "w1" }, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := good()
			tc.edit(&f)
			v, n := judgeOrder(f)
			if len(v) != tc.bad || len(n) != tc.noted {
				t.Errorf("violations %q, notes %q; want %d and %d", v, n, tc.bad, tc.noted)
			}
		})
	}
}
