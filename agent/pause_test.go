package agent_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/testkit"
)

// An operator's pause during a rollout holds it through a restart of every
// agent and a new commit: no replacement to the new SHA begins before
// resume (the fence checks desired, which the pause and resume both move),
// every node says who paused, and after resume every node converges.
func TestOperatorPauseHoldsThroughRestartsAndANewCommit(t *testing.T) {
	nodes := []string{"n1", "n2", "n3"}
	f := newWindowFleet(t, nodes, 1500*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	v2 := commitRecording(t, f.st, f.group, "v2", "")
	testkit.Eventually(t, time.Minute, "a replacement to v2 to begin", func() bool {
		for _, n := range nodes {
			if _, ok := f.rts[n].beganAt(v2); ok {
				return true
			}
		}
		return false
	})
	if _, _, err := f.st.PauseBy(ctx, f.group, "look at the canary", "ops@desk"); err != nil {
		t.Fatal(err)
	}
	f.restartAll(nodes)
	v3 := commitRecording(t, f.st, f.group, "v3", "")
	paused := func(s *coordinator.NodeState) bool {
		return s.State == coordinator.StatePaused && strings.Contains(s.Error, "paused by ops@desk: look at the canary")
	}
	for _, n := range nodes {
		waitNode(t, f.st, f.group, n, "paused by the operator under v3", func(s *coordinator.NodeState) bool {
			return s.Desired == v3 && paused(s)
		})
	}
	f.waitUIGate(nodes, coordinator.GatePaused, "paused by ops@desk: look at the canary")
	resumed := time.Now()
	if _, err := f.st.ResumeBy(ctx, f.group, "ops@desk"); err != nil {
		t.Fatal(err)
	}
	f.waitConverged(nodes, v3)
	f.beganFrom(nodes, v3, resumed, "resume")
}
