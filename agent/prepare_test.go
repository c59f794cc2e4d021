package agent_test

import (
	"strings"
	"testing"

	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/testkit/groupkit"
)

// An image that cannot be fetched (a typo, a registry down) fails the node
// before it asks for a slot: it joins no line, its workload is not touched,
// no failure counts against the rollout, and the agent tries again on its
// own, so the rollout goes on once the image can be had.
func TestPrepareFailureTakesNoSlotAndIsRetried(t *testing.T) {
	g := groupkit.New(t, "prepare")
	srv, st, group, k := g.Srv, g.Store, g.Name, g.Keys
	sha := commitRecording(t, st, group, "v1", "")
	rt := &recordingRuntime{unfetchable: 1}
	startAgent(t, st, group, "n1", rt, agent.Allow{})
	waitNode(t, st, group, "n1", "failed in prepare", func(n *coordinator.NodeState) bool {
		return n.State == coordinator.StateFailed && strings.HasPrefix(n.Error, "prepare: ") &&
			strings.Contains(n.Error, "registry unreachable")
	})
	// The retry comes after retryPause/2 at the soonest: the checks below
	// see the node between its two tries.
	contenders, _, err := srv.Client().KV().Keys(k.Slot()+"c/", "", nil)
	if err != nil || len(contenders) != 0 {
		t.Fatalf("a node that could not prepare joined the line: %v %v", contenders, err)
	}
	noFailureCounted(t, st, group, "a prepare failure")
	noDestructiveCalls(t, rt.Calls())
	waitNode(t, st, group, "n1", "converged after a second try", func(n *coordinator.NodeState) bool {
		return n.State == coordinator.StateConverged && n.SHA == sha
	})
	if got := rt.SHA(); got != sha {
		t.Fatalf("workload runs %q, want %q", got, sha)
	}
}
