package integration

import (
	"testing"
	"time"
)

// TestNemesisSchedule checks the schedule a seed draws, without a
// cluster: it replays, every fault it starts ends on the same target,
// at most maxFaults run at once, never two on one node, and over a few
// seeds every kind of event is drawn.
func TestNemesisSchedule(t *testing.T) {
	groups, nodes := []string{"g1", "g2"}, []string{"a", "b", "c", "d"}
	seen := map[string]bool{}
	for _, tc := range []struct {
		name string
		seed uint64
	}{{"seed 1", 1}, {"seed 2", 2}, {"seed 3", 3}, {"seed 42", 42}, {"seed 1e6", 1e6}} {
		t.Run(tc.name, func(t *testing.T) {
			s := schedule(tc.seed, 10*time.Minute, groups, nodes)
			if again := schedule(tc.seed, 10*time.Minute, groups, nodes); len(again) != len(s) {
				t.Fatalf("seed %d drew %d events, then %d", tc.seed, len(s), len(again))
			}
			checkFaults(t, s)
			for _, e := range s {
				seen[e.kind] = true
			}
		})
	}
	for kind, end := range ends {
		if !seen[kind] || !seen[end] {
			t.Errorf("five seeds of 10 minutes never drew %s (or its end %s)", kind, end)
		}
	}
}

func checkFaults(t *testing.T, s []event) {
	t.Helper()
	open := map[string]string{} // target -> fault
	for _, e := range s {
		target := e.node
		switch e.kind {
		case opKillLeader, opStartSrv:
			target = "server"
		case opCheckFail, opCheckPass:
			target = gateTarget
		}
		if _, starts := ends[e.kind]; starts {
			if open[target] != "" {
				t.Errorf("%s: %s is already under %s", e, target, open[target])
			}
			open[target] = e.kind
			faults := len(open)
			if open[gateTarget] != "" {
				faults-- // a check flip is no node's fault
			}
			if faults > maxFaults {
				t.Errorf("%s: %d faults at once %v", e, len(open), open)
			}
			continue
		}
		for kind, end := range ends {
			if end == e.kind && open[target] == kind {
				delete(open, target)
			}
		}
	}
	if len(open) > 0 {
		t.Errorf("faults never ended: %v", open)
	}
}
