package integration

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/fleetwatch"
)

const (
	sampleEvery  = 250 * time.Millisecond
	consulBudget = 5 * time.Second
	// testAuthor signs the commits of the cluster's other scenarios.
	testAuthor = "integration"
)

// checker checks invariants (a)-(c) of nemesisTest on each sample of the
// fleet invariant monitor. Only the monitor's goroutine touches its maps.
type checker struct {
	n        *nemesis
	mon      *fleetwatch.Monitor
	prevDown map[string]string
	prevGate map[string]string
	// held is who held a slot at the last sample, per node: a node seen
	// holding anew is a grant.
	held    map[string]bool
	windows map[string]*window
	created map[string]time.Time // container ID -> Docker's Created
	// ran is, per group and SHA, the nodes seen running that SHA alone
	// and healthy; desired the group's desired SHA at the last sample.
	ran     map[string]map[string]map[string]bool
	desired map[string]string
	exec    *execCheck // invariant (e), for the exec hosts
}

func (n *nemesis) check() *checker {
	ck := &checker{n: n, prevDown: map[string]string{}, prevGate: map[string]string{}, held: map[string]bool{},
		windows: map[string]*window{}, created: map[string]time.Time{}, ran: map[string]map[string]map[string]bool{},
		desired: map[string]string{}}
	o := n.c.watchOptions(nemesisGroups()...)
	o.Every, o.StateTimeout, o.Observe = sampleEvery, consulBudget, ck.sample
	ck.mon = fleetwatch.Start(o)
	return ck
}

func (ck *checker) stop() { ck.mon.Stop() }

func (ck *checker) samples() int { return ck.mon.Rounds() }

func (ck *checker) sample(s *fleetwatch.Sample) {
	g := s.Group
	if s.ProbeErr != nil {
		ck.n.note("sample %s: %v", g, s.ProbeErr)
		return
	}
	ws, gs := s.Workloads, s.State // gs nil: Consul out of reach (a leader election): (a) from Docker alone
	ck.checkDown(s)
	ck.noteRan(g, ws)
	ck.checkHooks(g, s)
	if gs == nil {
		return
	}
	ck.noteGate(g, gs)
	ck.noteOrderGate(g, gs)
	ck.checkCancel(g, ws, gs)
	ck.checkFailures(g, gs)
	ck.checkRollback(g, gs)
	ck.checkPull(g, gs)
}

// noteGate puts changes of desired and of the gate on the timeline.
func (ck *checker) noteGate(g string, gs *coordinator.GroupState) {
	if gs.Desired == nil {
		return
	}
	line := fmt.Sprintf("desired %s, gate %s, %d failure(s)", coordinator.ShortSHA(gs.Desired.SHA), gs.Gate().Reason, len(gs.Failures))
	if ck.prevGate[g] != line {
		ck.prevGate[g] = line
		ck.n.note("%s %s", g, line)
	}
}

// checkFailures is invariant (c), for the desired SHA.
func (ck *checker) checkFailures(g string, gs *coordinator.GroupState) {
	if gs.Desired == nil || gs.Spec == nil {
		return
	}
	u, sha, count := gs.Spec.Update, coordinator.ShortSHA(gs.Desired.SHA), len(gs.Failures)
	var latest time.Time
	var who []string
	for _, f := range gs.Failures {
		who = append(who, f.Node)
		if f.At.After(latest) {
			latest = f.At
		}
	}
	if p := gs.Pause; p != nil {
		// failure_action=rollback pauses instead when no SHA is fit to
		// roll back to (README): the pause says so.
		pauses := u.FailureAction == hashspec.FailurePause ||
			u.FailureAction == hashspec.FailureRollback && strings.HasSuffix(p.Reason, coordinator.NoRollbackTarget)
		// At K > 1 the nodes whose steps ran beside the one whose failure
		// paused may fail too, each recorded once after the pause: at most
		// K-1 of them.
		if extra := count - p.Failures; !pauses || p.Failures != gs.MaxFailures() || extra < 0 || extra > ck.n.k(g)-1 {
			ck.n.violate("c pause "+g+" "+sha, "(c) %s: pause of %s counts %d failure(s), %d recorded %v, failure_action=%s max_failures=%d",
				g, sha, p.Failures, count, who, u.FailureAction, gs.MaxFailures())
		}
		return
	}
	if count < gs.MaxFailures() || latest.Before(gs.Desired.CommittedAt) {
		return
	}
	if ck.failedAfterCancel(g, gs) {
		return // a failure after a cancel is recorded and does nothing else (README)
	}
	switch {
	case u.FailureAction == hashspec.FailurePause:
		ck.n.violate("c nopause "+g+" "+sha, "(c) %s: %d failure(s) of %s recorded %v, max_failures=%d, and no pause", g, count, sha, who, u.MaxFailures)
	case u.FailureAction == hashspec.FailureRollback && gs.Desired.Previous != "":
		ck.n.violate("c norollback "+g+" "+sha, "(c) %s: %d failure(s) of %s recorded %v, max_failures=%d, and still desired: no rollback",
			g, count, sha, who, u.MaxFailures)
	}
}

// failedAfterCancel says the desired SHA's last failure write came after
// its cancel, by Consul's own indexes: every failure write moves the SHA's
// failure counter, and a cancel touches desired, on which the failure's
// transaction is checked, so the write that came after saw the cancel.
func (ck *checker) failedAfterCancel(g string, gs *coordinator.GroupState) bool {
	if gs.Cancel == nil {
		return false
	}
	k, err := coordinator.NewKeys("", g)
	if err != nil {
		return false
	}
	kv := ck.n.c.api().KV()
	cancel, _, err1 := kv.Get(k.Cancel(gs.Desired.SHA), nil)
	count, _, err2 := kv.Get(k.FailCount(gs.Desired.SHA), nil)
	return err1 == nil && err2 == nil && cancel != nil && count != nil && count.ModifyIndex > cancel.ModifyIndex
}

// noteRan notes each node of g that runs one container, healthy.
func (ck *checker) noteRan(g string, ws map[string]workload) {
	for _, nd := range ck.n.nodesOf(g) {
		w := ws[nd]
		if len(w.IDs) != 1 || !w.Healthy {
			continue
		}
		if ck.ran[g] == nil {
			ck.ran[g] = map[string]map[string]bool{}
		}
		if ck.ran[g][w.SHAs[0]] == nil {
			ck.ran[g][w.SHAs[0]] = map[string]bool{}
		}
		ck.ran[g][w.SHAs[0]][nd] = true
	}
}

// checkRollback is the last part of (c): desired moved by another author
// than the tests is an automatic rollback, which goes only to a SHA that
// had converged: every node of g seen running it alone and healthy.
func (ck *checker) checkRollback(g string, gs *coordinator.GroupState) {
	if gs.Desired == nil || gs.Desired.SHA == ck.desired[g] {
		return
	}
	prev, d := ck.desired[g], gs.Desired
	ck.desired[g] = d.SHA
	if prev == "" || d.Author == nemesisAuthor || d.Author == testAuthor {
		return
	}
	ck.n.mu.Lock()
	judged := ck.n.committed[d.SHA]
	ck.n.mu.Unlock()
	sha := coordinator.ShortSHA(d.SHA)
	if !judged {
		ck.n.note("%s: automatic rollback to %s, committed before the run: where it goes is not judged (%q)", g, sha, d.Reason)
		return
	}
	seen := slices.Sorted(maps.Keys(ck.ran[g][d.SHA]))
	ck.n.note("%s: automatic rollback %s -> %s (%q); nodes seen running %s: %v", g, coordinator.ShortSHA(prev), sha, d.Reason, sha, seen)
	if len(seen) < len(ck.n.nodesOf(g)) {
		ck.n.violate("c rollback "+g+" "+sha, "(c) %s: failure_action=rollback moved desired %s -> %s, a SHA that never converged (nodes seen running it: %v of %v); want a converged SHA or a pause (%s)",
			g, coordinator.ShortSHA(prev), sha, seen, ck.n.nodesOf(g), coordinator.NoRollbackTarget)
	}
}
