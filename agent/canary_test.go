package agent_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/testkit"
)

var canaryNodes = []string{"n1", "n2", "n3", "n4"}

// canarySpec is release with one canary, promoted after healthy when it
// is not 0, by hand otherwise.
func (f *windowFleet) canarySpec(release string, healthy time.Duration) *hashspec.Spec {
	s := recordingSpec(f.t, f.group, release, "")
	s.Update.Canary = 1
	if healthy > 0 {
		s.Update.AutoPromote, s.Update.CanaryHealthyTime = true, hashspec.Duration(healthy)
	}
	return s
}

// commitCanary commits s and returns its SHA, the canary the commit chose
// (as Consul holds it), and the other nodes.
func (f *windowFleet) commitCanary(s *hashspec.Spec) (sha, canary string, others []string) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := f.st.Commit(ctx, f.group, s, "test", "commit with a canary")
	if err != nil {
		f.t.Fatal(err)
	}
	gs := f.state()
	if gs.Canaries == nil || len(gs.Canaries.Nodes) != 1 {
		f.t.Fatalf("canaries recorded: %+v", gs.Canaries)
	}
	canary = gs.Canaries.Nodes[0]
	return r.SHA, canary, slices.DeleteFunc(slices.Clone(canaryNodes), func(n string) bool { return n == canary })
}

// awaitPromotion waits for the canary to converge on sha and every other
// node to say it awaits the promotion, and returns when the canary's
// record says it converged.
func (f *windowFleet) awaitPromotion(sha, canary string, others []string) time.Time {
	f.t.Helper()
	f.waitConverged([]string{canary}, sha)
	for _, n := range others {
		waitNode(f.t, f.st, f.group, n, "awaiting promotion", func(s *coordinator.NodeState) bool {
			return s.State == coordinator.StateWaiting && strings.HasPrefix(s.Error, "awaiting promotion: canaries "+canary)
		})
	}
	return nodeState(f.t, f.st, f.group, canary).Since
}

// noneBegan fails the test when a replacement of any of nodes to sha
// began, watching for d.
func (f *windowFleet) noneBegan(nodes []string, sha string, d time.Duration) {
	f.t.Helper()
	testkit.Steady(f.t, d, 100*time.Millisecond, func() error {
		for _, n := range nodes {
			if at, ok := f.rts[n].beganAt(sha); ok {
				return fmt.Errorf("%s began replacing at %s, not promoted", n, at.Format(time.StampMilli))
			}
		}
		return nil
	})
}

// By hand: the canary goes first under K, the others wait through a
// restart of every agent, and move only after `rollagent promote`.
func TestCanaryPromotedByHand(t *testing.T) {
	f := newWindowFleet(t, canaryNodes, 0)
	v2, canary, others := f.commitCanary(f.canarySpec("v2", 0))
	f.awaitPromotion(v2, canary, others)
	if v := f.state().Gate(); v.State != coordinator.GateAwaitingPromotion {
		t.Fatalf("the group's gate: %s (%s), want awaiting_promotion", v.State, v.Reason)
	}
	f.waitUIGate(others, coordinator.GateAwaitingPromotion, "awaiting promotion")
	f.restartAll(canaryNodes)
	f.noneBegan(others, v2, 2*time.Second)
	promoted := time.Now()
	if _, err := f.st.PromoteBy(context.Background(), f.group, "looks good", "test"); err != nil {
		t.Fatal(err)
	}
	f.waitConverged(others, v2)
	f.beganFrom(others, v2, promoted, "the promotion")
}

// Automatically: no other node began before the canary had been healthy
// for canary_healthy_time, counted from its converged record, through a
// restart of every agent; then all converge with no promote.
func TestCanaryAutoPromotes(t *testing.T) {
	const healthy = 3 * time.Second
	f := newWindowFleet(t, canaryNodes, 0)
	v2, canary, others := f.commitCanary(f.canarySpec("v2", healthy))
	converged := f.awaitPromotion(v2, canary, others)
	f.restartAll(canaryNodes)
	f.waitConverged(others, v2)
	f.beganFrom(others, v2, converged.Add(healthy), fmt.Sprintf("the canary's %s healthy", healthy))
	if gs := f.state(); gs.Promoted != nil {
		t.Errorf("auto-promotion wrote a promotion record: %+v", gs.Promoted)
	}
}

// A canary that fails applies failure_action (pause): the group pauses
// and no other node moves, even once the healthy time has passed.
func TestCanaryFailurePausesTheRest(t *testing.T) {
	const healthy = time.Second
	f := newWindowFleet(t, canaryNodes, 0)
	s := f.canarySpec("v2", healthy)
	sha, err := s.SHA()
	if err != nil {
		t.Fatal(err)
	}
	// The commit's choice, made ahead by the same function, to make the
	// canary sick before it moves.
	sick := coordinator.ChooseCanaries(sha, canaryNodes, 1)[0]
	f.rts[sick].mu.Lock()
	f.rts[sick].sick = "canary unhealthy"
	f.rts[sick].mu.Unlock()
	v2, canary, others := f.commitCanary(s)
	if canary != sick {
		t.Fatalf("the commit chose %s, ChooseCanaries %s", canary, sick)
	}
	testkit.Eventually(t, time.Minute, "the canary's failure to pause the group", func() bool {
		return f.state().Gate().State == coordinator.GatePaused
	})
	f.restartAll(canaryNodes)
	f.noneBegan(others, v2, 3*healthy)
	if gs := f.state(); len(gs.Failures) != 1 || gs.Failures[0].Node != canary {
		t.Fatalf("failures %+v, want the canary's alone", gs.Failures)
	}
}

// A CANCEL while awaiting promotion never promotes: not by time (the
// canary stays healthy past the healthy time, through a restart of every
// agent), nor by hand (`promote` is refused).
func TestCanaryCancelWhileAwaitingNeverPromotes(t *testing.T) {
	const healthy = 4 * time.Second
	f := newWindowFleet(t, canaryNodes, 0)
	v2, canary, others := f.commitCanary(f.canarySpec("v2", healthy))
	f.awaitPromotion(v2, canary, others)
	if _, err := f.st.Cancel(context.Background(), f.group, v2, "canary looks wrong", "test"); err != nil {
		t.Fatal(err)
	}
	f.restartAll(canaryNodes)
	f.noneBegan(others, v2, 2*healthy)
	if _, err := f.st.PromoteBy(context.Background(), f.group, "", "test"); !errors.Is(err, coordinator.ErrPromoteCancelled) {
		t.Fatalf("promote under a CANCEL: %v, want refused", err)
	}
	f.noneBegan(others, v2, time.Second)
	if gs := f.state(); gs.Promoted != nil || gs.Gate().State != coordinator.GateCancelled {
		t.Fatalf("promotion %+v, gate %s: want none, cancelled", gs.Promoted, gs.Gate().State)
	}
}

// A pause while awaiting promotion never promotes, through a restart of
// every agent and past the healthy time; after the resume the canary
// must be healthy the whole healthy time again before the rest move.
func TestCanaryPauseWhileAwaitingNeverPromotes(t *testing.T) {
	const healthy = 4 * time.Second
	f := newWindowFleet(t, canaryNodes, 0)
	v2, canary, others := f.commitCanary(f.canarySpec("v2", healthy))
	f.awaitPromotion(v2, canary, others)
	if _, _, err := f.st.PauseBy(context.Background(), f.group, "look first", "test"); err != nil {
		t.Fatal(err)
	}
	f.restartAll(canaryNodes)
	f.noneBegan(others, v2, 2*healthy)
	resumed := time.Now()
	if _, err := f.st.ResumeBy(context.Background(), f.group, "test"); err != nil {
		t.Fatal(err)
	}
	f.waitConverged(others, v2)
	f.beganFrom(others, v2, resumed.Add(healthy), "the healthy time after the resume")
}

// A node that holds a slot when a commit with canaries lands, and is not
// one of its canaries, finishes its step and does not go on to the new
// SHA ahead of the canaries: for it the gate is closed, not a hold.
func TestCanaryHolderOfAnEarlierStepWaitsForPromotion(t *testing.T) {
	f := newWindowFleet(t, canaryNodes, 3*time.Second)
	v2 := commitRecording(t, f.st, f.group, "v2", "")
	var holder string
	testkit.Eventually(t, time.Minute, "a replacement to v2 to begin", func() bool {
		for _, n := range canaryNodes {
			if _, ok := f.rts[n].beganAt(v2); ok {
				holder = n
				return true
			}
		}
		return false
	})
	// A release whose canary is another node: the choice is the commit's,
	// made ahead by the same function.
	var s *hashspec.Spec
	for i := 0; i < 20 && s == nil; i++ {
		c := f.canarySpec(fmt.Sprintf("v3-%d", i), 0)
		sha, err := c.SHA()
		if err != nil {
			t.Fatal(err)
		}
		if coordinator.ChooseCanaries(sha, canaryNodes, 1)[0] != holder {
			s = c
		}
	}
	if s == nil {
		t.Fatalf("no release of 20 has a canary other than %s", holder)
	}
	v3, canary, others := f.commitCanary(s)
	f.awaitPromotion(v3, canary, others)
	f.noneBegan(others, v3, time.Second)
	promoted := time.Now()
	if _, err := f.st.PromoteBy(context.Background(), f.group, "", "test"); err != nil {
		t.Fatal(err)
	}
	f.waitConverged(others, v3)
	f.beganFrom(others, v3, promoted, "the promotion")
}
