package agent_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/fleettest"
	"github.com/rollagent/rollagent/internal/testkit"
)

// verifyRecordAfter is the agent's delay before a "verifying" record.
const verifyRecordAfter = time.Second

// checkingRuntime is a recordingRuntime whose health check takes a while,
// and which reads the node's record as the check ends.
type checkingRuntime struct {
	*recordingRuntime
	takes   time.Duration
	st      *coordinator.Store
	group   string
	seenEnd chan string // the record's state as the check ended
}

func (r *checkingRuntime) WaitHealthy(ctx context.Context, s *hashspec.Spec) error {
	select {
	case <-time.After(r.takes):
	case <-ctx.Done():
		return ctx.Err()
	}
	gs, err := r.st.Read(ctx, r.group, nil)
	state := fmt.Sprint(err)
	if err == nil {
		state = "no record"
		for _, n := range gs.Nodes {
			if n.Node == "n1" {
				state = string(n.State)
			}
		}
	}
	select {
	case r.seenEnd <- state:
	default:
	}
	return r.recordingRuntime.WaitHealthy(ctx, s)
}

// A health check that passes within a second leaves no "verifying" record,
// as it would be true only for a moment; a longer one shows "verifying"
// while it runs. Either way "converged" is the last word: a late
// "verifying" write must never land after it.
func TestVerifyingRecordOnlyForSlowChecks(t *testing.T) {
	srv := consultest.NewDev(t)
	tests := []struct {
		name  string
		takes time.Duration
		want  coordinator.NodeStatus // the record as the check ends
	}{
		{"quick check", 0, coordinator.StateReplacing},
		{"slow check", 2500 * time.Millisecond, coordinator.StateVerifying},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := coordinator.NewStore(srv.Client(), "")
			group := fleettest.Group(fmt.Sprintf("verifying%d", i))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			commitRecording(t, st, group, "v1", "")
			rt := &checkingRuntime{recordingRuntime: &recordingRuntime{}, takes: tc.takes, st: st, group: group,
				seenEnd: make(chan string, 1)}
			startAgent(t, st, group, "n1", rt, agent.Allow{})
			select {
			case got := <-rt.seenEnd:
				if got != string(tc.want) {
					t.Fatalf("record as the health check ended: %q, want %q", got, tc.want)
				}
			case <-ctx.Done():
				t.Fatal("no health check within 30s")
			}
			waitNode(t, st, group, "n1", "converged", func(n *coordinator.NodeState) bool {
				return n.State == coordinator.StateConverged
			})
			// It stays so past the moment a stray "verifying" would land.
			testkit.Steady(t, verifyRecordAfter+500*time.Millisecond, 100*time.Millisecond, func() error {
				if n := nodeState(t, st, group, "n1"); n == nil || n.State != coordinator.StateConverged {
					return fmt.Errorf("record after converging: %+v, want converged", n)
				}
				return nil
			})
		})
	}
}
