package agent_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/testkit/groupkit"
)

// Issue 20: the grant fences the first destructive step only for a moment
// (agent.GrantFence) after the grant, and that moment was timed from when
// its reply was read, not from when the grant was sent. A reply held back
// longer than that let the first step go ahead on a gate that Consul had
// closed meanwhile. Here a CANCEL lands while the grant's reply is held
// back: the first step must fence, and Consul, whose gate is closed,
// must stop it. Nothing on the node may change; its claim is then given
// back under the closed gate.
func TestDelayedGrantReplyFencesFirstStep(t *testing.T) {
	g := groupkit.New(t, "grantdelay") // the test's view, and its CANCEL
	srv, st, group, k := g.Srv, g.Store, g.Name, g.Keys
	v1 := commitRecording(t, st, group, "v1", "")
	v2, _ := recordingSpec(t, group, "v2", "").SHA()
	cl, faults := srv.FaultyClient()
	rt := &recordingRuntime{}
	startAgent(t, coordinator.NewStore(cl, ""), group, "n1", rt, agent.Allow{})
	waitNode(t, st, group, "n1", "converged on v1", converged(v1))
	rt.Calls()
	cancelled := make(chan error, 1)
	faults.OnTxn(func(ops api.TxnOps) bool {
		// The grant alone both checks the gate and locks a key: a fence
		// locks nothing, and a join or a reclaim checks no gate.
		return consultest.TxnHas(ops, api.KVCheckIndex, k.Desired()) && consultest.TxnHas(ops, api.KVLock, "")
	}, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := st.Cancel(ctx, group, v2, "a CANCEL while the grant's reply is held back", "test")
		cancelled <- err
		// Held back past the second for which the grant used to count as
		// the first step's fence (issue 25 did away with that window: no
		// step counts the grant as its fence).
		time.Sleep(1500 * time.Millisecond)
		return nil
	})
	commitRecording(t, st, group, "v2", "")
	select {
	case err := <-cancelled:
		if err != nil {
			t.Fatalf("cancel while the grant's reply was held back: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("no grant within a minute")
	}
	g.WaitFor(30*time.Second, "n1's claim given back under the CANCEL", func() bool {
		return slotFree(t, g, "n1")
	})
	if n := nodeState(t, st, group, "n1"); n == nil || n.SHA != v1 || n.State != coordinator.StateCancelled {
		t.Fatalf("n1's record %+v, want cancelled on %.12s", n, v1)
	}
	calls := rt.Calls()
	if !slices.Contains(calls, "Replace") {
		t.Fatalf("the agent never began its first step, so this tested nothing; calls: %v", calls)
	}
	if got := rt.SHA(); got != v1 || slices.Contains(calls, "Restore") || slices.Contains(calls, "Finish") {
		t.Fatalf("the workload is %.12s, want %.12s untouched: the first step went ahead past a closed gate; calls: %v", got, v1, calls)
	}
}
