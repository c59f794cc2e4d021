package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/fleetwatch"
	"github.com/rollagent/rollagent/lockstep"
)

// TestDownForgivesAStepBegunBeforeAnotherOutage replays seed 846060991's
// managers at K = 1: m3, crashed by the nemesis, takes its slot back and
// runs a release that cannot converge; m1 is wedged while m3 holds and
// claims its own slot, down already; then m3's crash ends while its step
// still runs. m3's step began before m1's outage, so the overlap is one
// the rollout could not prevent (G), not a violation.
func TestDownForgivesAStepBegunBeforeAnotherOutage(t *testing.T) {
	n := &nemesis{t: t, start: time.Now(), f: newFaults(), vseen: map[string]int{}}
	ck := &checker{n: n, prevDown: map[string]string{}, held: map[string]bool{}}
	known := time.Now() // Consul has shown each outage: no blind window, no Consul asked
	sample := func(down []string, holding ...string) {
		h := &lockstep.Holders{Holding: map[string]lockstep.Entry{}}
		for _, nd := range holding {
			h.Holding["session-"+nd] = lockstep.Entry{Name: nd, State: "holding"}
		}
		ck.checkDown(&fleetwatch.Sample{Group: mgrs, State: &coordinator.GroupState{Group: mgrs, Holders: h}, Down: down})
	}
	n.f.idle["m3"] = &outage{cause: "crash-workload", known: known}
	sample([]string{"m3"})
	sample([]string{"m3"}, "m3")
	n.f.idle["m1"] = &outage{cause: "wedge-workload", known: known}
	sample([]string{"m1", "m3"}, "m3")
	sample([]string{"m1", "m3"}, "m1", "m3")
	n.f.idle["m3"].revived = true
	sample([]string{"m1", "m3"}, "m1", "m3")
	if len(n.violations) > 0 {
		t.Fatalf("violations: %v\ntimeline:\n%s", n.violations, strings.Join(n.timeline, "\n"))
	}
	// A node granted after the outage began is not forgiven: m2 joining
	// the down is one more than max(K, |N|) + |G| allows.
	sample([]string{"m1", "m2", "m3"}, "m1", "m2", "m3")
	if len(n.violations) != 1 {
		t.Fatalf("m2 down in a step begun during m1's outage: want 1 violation, got %v", n.violations)
	}
}
