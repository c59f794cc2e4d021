package fleetwatch

import (
	"fmt"
	"strings"
	"testing"
)

// Tally is what a monitor saw of a group.
type Tally struct {
	// Samples counts the samples that read the group's workloads (with no
	// probe, its state); Unanswered those a probe or Consul did not answer.
	Samples, Unanswered int
	// MaxDown is the most nodes down at one sample; Worst the first sample
	// that saw them: when, which and why.
	MaxDown int
	Worst   string
	// MaxHolding is the most slot holders at one sample, MaxBusy the most
	// node records replacing or verifying; -1 while Consul never answered.
	MaxHolding, MaxBusy int
	// Changes are the changes of the group's down set, bounded.
	Changes []string
}

// Unbounded leaves a bound of Bounds unchecked.
const Unbounded = -1

// Bounds are what a group's tally may show at worst.
type Bounds struct {
	// Down, Holding and Busy bound MaxDown, MaxHolding and MaxBusy;
	// Unbounded leaves one unchecked.
	Down, Holding, Busy int
	// MinSamples is the fewest samples that make a verdict.
	MinSamples int
}

// AtMost is the rollout's guarantee at max_parallel k: at most k nodes
// down and at most k holding a slot (counted when Consul is read).
func AtMost(k int) Bounds { return Bounds{Down: k, Holding: k, Busy: Unbounded} }

// violations lists how t exceeds b.
func (t Tally) violations(b Bounds) []string {
	var out []string
	if t.Samples < b.MinSamples {
		out = append(out, fmt.Sprintf("only %d samples, want at least %d", t.Samples, b.MinSamples))
	}
	if b.Down != Unbounded && t.MaxDown > b.Down {
		out = append(out, fmt.Sprintf("%d down at once, want at most %d (first worst sample %s)", t.MaxDown, b.Down, t.Worst))
	}
	if b.Holding != Unbounded && t.MaxHolding > b.Holding {
		out = append(out, fmt.Sprintf("%d holding a slot at once, want at most %d", t.MaxHolding, b.Holding))
	}
	if b.Busy != Unbounded && t.MaxBusy > b.Busy {
		out = append(out, fmt.Sprintf("%d nodes mid-replacement (replacing or verifying) at once, want at most %d", t.MaxBusy, b.Busy))
	}
	return out
}

// Finish stops the monitor, logs each group's tally and reports, with
// t.Errorf, every group over b. It says whether all held: a caller that
// must stop there calls t.FailNow.
func (m *Monitor) Finish(t testing.TB, b Bounds) bool {
	t.Helper()
	m.Stop()
	ok := true
	var changes []string
	for _, g := range m.groups {
		tl := m.Tally(g)
		t.Logf("invariant monitor: %s: %d samples (%d unanswered), at most %d down, %d holding, %d mid-replacement (bounds %+v)",
			g, tl.Samples, tl.Unanswered, tl.MaxDown, tl.MaxHolding, tl.MaxBusy, b)
		for _, v := range tl.violations(b) {
			t.Errorf("group %s: %s", g, v)
			ok = false
		}
		changes = append(changes, tl.Changes...)
	}
	if t.Failed() || m.o.Verbose {
		t.Logf("down-set changes:\n%s", strings.Join(changes, "\n"))
	}
	return ok
}
