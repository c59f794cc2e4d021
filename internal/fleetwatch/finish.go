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
	// MaxDownInDomain is the most nodes of one domain down at one sample,
	// WorstDomain the first sample that saw them; counted for a group
	// given domains (Options.Domains) alone.
	MaxDownInDomain int
	WorstDomain     string
	// Changes are the changes of the group's down set, bounded.
	Changes    []string
	probed     bool     // the group's workloads were probed: MaxDown means something
	domains    bool     // the group was given domains: MaxDownInDomain means something
	undomained []string // the group's nodes its domains leave out
}

// Unbounded leaves a bound of Bounds unchecked.
const Unbounded = -1

// Bounds are what a group's tally may show at worst.
type Bounds struct {
	// Down, Holding and Busy bound MaxDown, MaxHolding and MaxBusy;
	// Unbounded leaves one unchecked.
	Down, Holding, Busy int
	// DownInDomain bounds MaxDownInDomain. Zero leaves it unchecked (none
	// down anywhere is Down: 0). Set, it needs every node of the group
	// given a domain: a node without one would go uncounted.
	DownInDomain int
	// MinSamples is the fewest samples that make a verdict.
	MinSamples int
}

// AtMost is the rollout's guarantee at max_parallel k: at most k nodes
// down and at most k holding a slot (counted when Consul is read).
func AtMost(k int) Bounds { return Bounds{Down: k, Holding: k, Busy: Unbounded} }

// PerDomain is b with at most n nodes of one domain down: the rollout's
// guarantee under update.max_parallel_per's max n.
func (b Bounds) PerDomain(n int) Bounds {
	b.DownInDomain = n
	return b
}

// String says what the monitor counted, leaving out what it could not.
func (t Tally) String() string {
	s := fmt.Sprintf("%d samples (%d unanswered)", t.Samples, t.Unanswered)
	if t.probed {
		s += fmt.Sprintf(", at most %d down", t.MaxDown)
	}
	if t.probed && t.domains {
		s += fmt.Sprintf(", at most %d down in one domain", t.MaxDownInDomain)
	}
	if t.MaxHolding >= 0 {
		s += fmt.Sprintf(", %d holding a slot, %d mid-replacement", t.MaxHolding, t.MaxBusy)
	}
	return s
}

// violations lists how t exceeds b.
func (t Tally) violations(b Bounds) []string {
	var out []string
	if t.Samples < b.MinSamples {
		out = append(out, fmt.Sprintf("only %d samples, want at least %d", t.Samples, b.MinSamples))
	}
	if b.Down != Unbounded && t.MaxDown > b.Down {
		out = append(out, fmt.Sprintf("%d down at once, want at most %d (first worst sample %s)", t.MaxDown, b.Down, t.Worst))
	}
	out = append(out, t.domainViolations(b)...)
	if b.Holding != Unbounded && t.MaxHolding > b.Holding {
		out = append(out, fmt.Sprintf("%d holding a slot at once, want at most %d", t.MaxHolding, b.Holding))
	}
	if b.Busy != Unbounded && t.MaxBusy > b.Busy {
		out = append(out, fmt.Sprintf("%d nodes mid-replacement (replacing or verifying) at once, want at most %d", t.MaxBusy, b.Busy))
	}
	return out
}

// domainViolations lists how t exceeds b's bound per domain, or why it
// cannot tell.
func (t Tally) domainViolations(b Bounds) []string {
	switch {
	case b.DownInDomain == 0:
		return nil
	case !t.domains:
		return []string{fmt.Sprintf("a bound of %d down per domain, but no domains were given", b.DownInDomain)}
	case len(t.undomained) > 0:
		return []string{fmt.Sprintf("a bound of %d down per domain, but nodes %v have no domain", b.DownInDomain, t.undomained)}
	case t.MaxDownInDomain > b.DownInDomain:
		return []string{fmt.Sprintf("%d down in one domain at once, want at most %d (first worst sample %s)", t.MaxDownInDomain, b.DownInDomain, t.WorstDomain)}
	}
	return nil
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
		t.Logf("invariant monitor: %s: %s (bounds %+v)", g, tl, b)
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

// Require is Finish that stops the test on a violation.
func (m *Monitor) Require(t testing.TB, b Bounds) {
	t.Helper()
	if !m.Finish(t, b) {
		t.FailNow()
	}
}
