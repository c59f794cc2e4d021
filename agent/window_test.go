package agent_test

import (
	"strings"
	"testing"
	"time"

	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/testkit"
)

// A rollout committed outside its maintenance window holds, through a
// restart of every agent: no node's replacement begins before the window
// opens, and every node says why it waits; once it opens, every node
// converges.
func TestWindowHoldsRolloutUntilItOpens(t *testing.T) {
	nodes := []string{"n1", "n2", "n3"}
	f := newWindowFleet(t, nodes, 0)
	opens := time.Now().UTC().Truncate(time.Minute).Add(time.Minute)
	if time.Until(opens) < 20*time.Second {
		opens = opens.Add(time.Minute)
	}
	v2 := f.commit("v2", hashspec.Window{Start: opens.Format("15:04"), Length: hashspec.Duration(time.Hour)})
	for _, n := range nodes {
		waitNode(t, f.st, f.group, n, "waiting outside the window", func(s *coordinator.NodeState) bool {
			return s.State == coordinator.StateWaiting && strings.HasPrefix(s.Error, "outside the maintenance window; the next opens")
		})
	}
	f.waitUIGate(nodes, coordinator.GateOutsideWindow, "outside the maintenance window; the next opens")
	f.restartAll(nodes)
	// waitNode's bound is a minute from when the window opens.
	testkit.Eventually(t, 2*time.Minute, "the window to open", func() bool { return !time.Now().Before(opens) })
	f.waitConverged(nodes, v2)
	f.beganFrom(nodes, v2, opens, "the window opened")
}

// A window that closes mid-rollout: the node mid-step finishes its step
// and converges, no replacement begins after the close (a node in line
// leaves it), and the nodes left say they wait for the next window.
func TestWindowClosedMidRolloutLetsTheHolderFinish(t *testing.T) {
	nodes := []string{"n1", "n2", "n3"}
	f := newWindowFleet(t, nodes, 6*time.Second)
	now := time.Now().UTC()
	start := now.Truncate(time.Minute)
	closes := now.Add(9 * time.Second)
	v2 := f.commit("v2", hashspec.Window{Start: start.Format("15:04"), Length: hashspec.Duration(closes.Sub(start))})
	// Three steps of 6 s do not fit in 9 s: at most two begin.
	var began, left []string
	testkit.Eventually(t, time.Minute, "the rollout to settle after the window closed", func() bool {
		if time.Now().Before(closes.Add(8 * time.Second)) {
			return false
		}
		began, left = nil, nil
		for _, n := range nodes {
			if _, ok := f.rts[n].beganAt(v2); ok {
				began = append(began, n)
			} else {
				left = append(left, n)
			}
		}
		return true
	})
	if len(began) == 0 || len(left) == 0 {
		t.Fatalf("began %v, left %v: want some of each", began, left)
	}
	f.waitConverged(began, v2)
	for _, n := range began {
		if at, _ := f.rts[n].beganAt(v2); !at.Before(closes) {
			t.Errorf("%s began replacing at %s, after the window closed at %s", n, at.Format(time.StampMilli), closes.Format(time.StampMilli))
		}
	}
	for _, n := range left {
		waitNode(t, f.st, f.group, n, "waiting for the next window", func(s *coordinator.NodeState) bool {
			return s.State == coordinator.StateWaiting && strings.HasPrefix(s.Error, "outside the maintenance window")
		})
	}
	gs := f.state()
	if gs.Holders != nil && len(gs.Holders.Holding)+len(gs.Holders.Waiting) > 0 {
		t.Errorf("outside the window, holders %v and waiters %v remain", gs.Holders.Holding, gs.Holders.Waiting)
	}
}

// An agent stopped mid-step finishes or undoes the step, and its record
// says how the step ended, not the fence's "replacing", with the stop
// mark.
func TestStopMidStepFinishesAndSaysSo(t *testing.T) {
	f := newWindowFleet(t, []string{"n1"}, 3*time.Second)
	v2 := commitRecording(t, f.st, f.group, "v2", "")
	testkit.Eventually(t, time.Minute, "n1's replacement to begin", func() bool {
		_, ok := f.rts["n1"].beganAt(v2)
		return ok
	})
	f.agents["n1"].stop(t)
	n := nodeState(t, f.st, f.group, "n1")
	if n == nil || n.State == coordinator.StateReplacing || n.State == coordinator.StateVerifying || n.Stopped == nil {
		t.Fatalf("record after a stop mid-step: %+v; want how the step ended, with the stop mark", n)
	}
	// Its index key goes with the mark (in the release, when the stop
	// comes under the slot), so Down finds it without reading every record.
	k, _ := f.st.Keys(f.group)
	if p, _, err := f.st.Get(t.Context(), k.Stopped("n1"), nil); err != nil || p == nil || !n.StopIndex {
		t.Fatalf("stop index key after a stop mid-step: %v, %v, record's stop_index %v; want it there", p, err, n.StopIndex)
	}
}
