package agent_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/testkit/groupkit"
)

// Issue 25, review: `rollagent node rm --force` of a node whose agent died
// while it verified a first deploy (nothing set aside) deletes the record
// that marked the step unverified, and leaves its claim. The restarted
// agent must verify the workload under its slot before the node counts as
// converged: here the release passes a first probe and fails within
// min_healthy_time, so the node must end failed, never converged. On
// 6d7f554 it reclaimed its slot, found the workload healthy at that look,
// and released it as converged.
func TestNodeRemovedMidVerifyIsVerifiedAgain(t *testing.T) {
	g := groupkit.New(t, "rmverify")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v1 := commitRecording(t, g.Store, g.Name, "v1", "")
	// What the killed agent left: its record, its claim, and the workload.
	left := coordinator.NodeState{Node: "n1", SHA: v1, Desired: v1, State: coordinator.StateVerifying, Since: time.Now().UTC()}
	if err := g.Store.PutNode(ctx, g.Name, left); err != nil {
		t.Fatal(err)
	}
	putClaim(t, g.Client, g.Keys, "n1", v1)
	if _, err := g.Store.RemoveNode(ctx, g.Name, "n1", true, "test", "forced mid-verify"); err != nil {
		t.Fatal(err)
	}
	rt := &recordingRuntime{sha: v1, sick: "test: unhealthy after its first probe"}
	startAgent(t, g.Store, g.Name, "n1", rt, agent.Allow{})
	var final *coordinator.NodeState
	g.WaitFor(time.Minute, "n1 to settle on converged or failed", func() bool {
		final = nodeState(t, g.Store, g.Name, "n1")
		return final != nil && (final.State == coordinator.StateConverged || final.State == coordinator.StatePaused ||
			final.State == coordinator.StateFailed)
	})
	if final.State == coordinator.StateConverged {
		t.Fatalf("n1 published converged on a release it never verified (calls %q)", rt.Calls())
	}
	gs, err := g.Store.Read(ctx, g.Name, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(gs.Failures) != 1 || gs.Failures[0].Node != "n1" || !slices.Contains(rt.Calls(), "WaitHealthy") {
		t.Fatalf("failures %+v: want n1's failure of the release it verified", gs.Failures)
	}
}
