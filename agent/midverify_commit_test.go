package agent_test

import (
	"slices"
	"testing"
	"time"

	"github.com/rollagent/rollagent/internal/fleettest"
	"github.com/rollagent/rollagent/internal/fleetwatch"
)

// A good release committed while the holder verifies a bad one (the
// nemesis' heal, seed 842819924): the fence before the undo finds desired
// moved and leaves the step to the next look, which comes at the good
// release, reclaims the slot and verifies what the step left. That fails:
// a failure of the bad release, which leaves the node behind the good one.
// It must go on to it, not wait for yet another commit.
func TestFailedResumedStepOfAnOldCommitGoesOn(t *testing.T) {
	f, ns, _ := deployed(t, "web", 3)
	mon := f.sample(ns)
	// Docker calls the bad release "starting" for the whole test (100
	// probes) and never "unhealthy": the node is never down by a sustained
	// signal, so no change of its health wakes its agent's wait.
	bad := f.commit(fleettest.Spec(t, fleettest.SpecOptions{Group: f.group, Image: f.image("bad", map[string]string{"DEMOAPP_UNHEALTHY": "1"}),
		MaxParallel: 1, FailureAction: "pause", MaxFailures: 2, HealthyDeadline: 8 * time.Second, ProbeRetries: 100}))
	victim := f.holderName()
	f.waitFor(90*time.Second, "the bad release's container to start on "+victim, func() bool {
		w := f.workloads()[victim]
		return slices.Contains(w.SHAs, bad) && len(w.Running) > 0
	})
	good := f.commit(f.spec(f.image("v3", nil), 1, "pause", 1))
	f.waitFor(2*time.Minute, "every node on the good release", func() bool { return f.converged(ns, good) })
	mon.Require(t, fleetwatch.AtMost(1))
	if gs := f.state(); len(gs.Failures) != 0 || gs.Pause != nil {
		t.Fatalf("the good release has %d failures and pause %v; want none: the failure was the bad release's", len(gs.Failures), gs.Pause)
	}
}
