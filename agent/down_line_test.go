package agent_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/fleettest"
	"github.com/rollagent/rollagent/internal/testkit"
)

// heldRollout starts n1 on v1, commits v2 and waits until n1 holds the
// only slot (K = 1) in the middle of its step, which lasts until the test
// closes the returned channel.
func heldRollout(t *testing.T, name string) (st *coordinator.Store, group, v1, v2 string, release chan struct{}) {
	t.Helper()
	srv := consultest.NewDev(t)
	st = coordinator.NewStore(srv.Client(), "")
	group = fleettest.Group(name)
	v1 = commitRecording(t, st, group, "v1", "")
	rt1 := newScripted(v1)
	release = make(chan struct{})
	rt1.hold = release
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	startAgent(t, st, group, "n1", rt1, agent.Allow{})
	waitNode(t, st, group, "n1", "converged on v1", func(n *coordinator.NodeState) bool { return n.SHA == v1 })
	v2 = commitRecording(t, st, group, "v2", "")
	testkit.Eventually(t, 30*time.Second, "n1 replacing under the slot", func() bool { return len(rt1.replaces()) == 1 })
	return st, group, v1, v2, release
}

// One failed probe as its agent looks does not make a node that is behind
// claim its slot past the line while another node holds the only one: it
// is not down (DownAfter), so it waits its turn.
func TestOneFailedProbeDoesNotJumpTheLine(t *testing.T) {
	st, group, v1, v2, release := heldRollout(t, "oneprobe")
	rt2 := newScripted(v1)
	failing := time.Now().Add(3 * time.Second)
	rt2.setSick(func() bool { return time.Now().Before(failing) })
	startAgent(t, st, group, "n2", rt2, agent.Allow{})
	testkit.Eventually(t, 30*time.Second, "n2 in line, or claiming", func() bool {
		inLine, using := slotOf(t, st, group)
		return slices.Contains(inLine, "n2") || slices.Contains(using, "n2") || len(rt2.replaces()) > 0
	})
	if _, using := slotOf(t, st, group); !slices.Equal(using, []string{"n1"}) {
		t.Fatalf("the slot is used by %v while n1 holds it and n2 failed one probe; want [n1]", using)
	}
	notReplaced(t, "while n1 holds the only slot", map[string]*scriptedRuntime{"n2": rt2})
	close(release)
	for _, n := range []string{"n1", "n2"} {
		waitNode(t, st, group, n, "converged on v2", func(n *coordinator.NodeState) bool {
			return n.SHA == v2 && n.State == coordinator.StateConverged
		})
	}
}

// A node down for good (failing for longer than DownAfter) claims its slot
// ahead of the line, and reads its health again before its step: healthy
// again by then, it releases and goes back in line, and is not replaced
// until its turn comes.
func TestANodeHealthyAgainAfterClaimingGoesBackInLine(t *testing.T) {
	st, group, v1, v2, release := heldRollout(t, "healthyagain")
	rt2 := newScripted(v1)
	var healed atomic.Bool // its workload is back once its slot was claimed
	rt2.setSick(func() bool {
		if healed.Load() {
			return false
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		gs, err := st.Read(ctx, group, nil)
		if err != nil || gs.Holders == nil {
			return true
		}
		if _, ok := gs.Holders.ClaimOf("n2"); ok {
			healed.Store(true)
			return false
		}
		return true
	})
	startAgent(t, st, group, "n2", rt2, agent.Allow{})
	// Down takes DownAfter (10 s) of failing readings: meanwhile n2 waits
	// in line, which it leaves to claim its slot once it is down.
	testkit.Eventually(t, time.Minute, "n2 claimed, healthy again and back in line", func() bool {
		inLine, using := slotOf(t, st, group)
		return len(rt2.replaces()) > 0 || healed.Load() && slices.Contains(inLine, "n2") && !slices.Contains(using, "n2")
	})
	notReplaced(t, "healthy again after its claim, while n1 holds the only slot", map[string]*scriptedRuntime{"n2": rt2})
	if _, using := slotOf(t, st, group); !slices.Equal(using, []string{"n1"}) {
		t.Fatalf("the slot is used by %v; want [n1]", using)
	}
	close(release)
	for _, n := range []string{"n1", "n2"} {
		waitNode(t, st, group, n, "converged on v2", func(n *coordinator.NodeState) bool {
			return n.SHA == v2 && n.State == coordinator.StateConverged
		})
	}
}
