package agent_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/fleettest"
)

// An agent that finds its workload already on the desired SHA while its own
// record says it was still replacing or verifying (it was killed before it
// saw the new workload healthy, on a first deploy, with nothing set aside to
// recover) verifies it under a slot before the node counts as converged: a
// bad release must not pass for a good one and roll on. A workload that
// fails it is left in place, as there is nothing older to restore. A node
// whose record says converged is not verified again.
func TestUnverifiedWorkloadIsVerifiedFirst(t *testing.T) {
	srv := consultest.NewDev(t)
	tests := []struct {
		name     string
		recorded coordinator.NodeStatus
		sick     string
		want     coordinator.NodeStatus
		verifies bool
	}{
		{"killed while verifying, healthy", coordinator.StateVerifying, "", coordinator.StateConverged, true},
		{"killed while replacing, crash-looping", coordinator.StateReplacing, "new container is not healthy: restarting",
			coordinator.StatePaused, true}, // max_failures is 1
		{"recorded converged", coordinator.StateConverged, "", coordinator.StateConverged, false},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := coordinator.NewStore(srv.Client(), "")
			group := fleettest.Group(fmt.Sprintf("verify%d", i))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			sha := commitRecording(t, st, group, "v1", "")
			// What a killed agent left: the new workload, and its record.
			rt := &recordingRuntime{sha: sha, sick: tc.sick}
			left := coordinator.NodeState{Node: "n1", SHA: sha, Desired: sha, State: tc.recorded, Since: time.Now().UTC()}
			if err := st.PutNode(ctx, group, left); err != nil {
				t.Fatal(err)
			}
			a := startAgent(t, st, group, "n1", rt, agent.Allow{})
			waitNode(t, st, group, "n1", string(tc.want), func(n *coordinator.NodeState) bool {
				return n.State == tc.want && n.Since.After(left.Since)
			})
			a.stop(t)
			calls := rt.Calls()
			if got := slices.Contains(calls, "WaitHealthy"); got != tc.verifies {
				t.Fatalf("verified: %v, want %v (calls %q)", got, tc.verifies, calls)
			}
			if slices.Contains(calls, "Replace") {
				t.Fatalf("replaced a workload already on the desired SHA (calls %q)", calls)
			}
			if tc.sick == "" {
				return
			}
			gs, err := st.Read(ctx, group, nil)
			if err != nil {
				t.Fatal(err)
			}
			// Nothing older to restore: the workload stays, and the node
			// stays out of the rollout until resume.
			if len(gs.Failures) != 1 || gs.Failures[0].Node != "n1" || slices.Contains(calls, "Restore") || rt.SHA() != sha {
				t.Fatalf("failures %+v, calls %q, workload %q: want n1's failure recorded and its workload left in place",
					gs.Failures, calls, rt.SHA())
			}
		})
	}
}
