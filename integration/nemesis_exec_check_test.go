package integration

import (
	"strconv"
	"strings"
	"time"

	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/fleettest"
	"github.com/rollagent/rollagent/internal/fleetwatch"
	"github.com/rollagent/rollagent/internal/forkhook"
)

// recordLag is how long an exec host's install may differ from its
// record while it is in no step: the record of a step is written under
// the slot, so outside one they agree but for the sampling's own gap.
const recordLag = 2 * time.Second

// execCheck is invariant (e) of nemesisTest across samples, for the exec
// hosts: no hook child outlives its step (issue 25, item 5).
//
//   - An install (the installed-version file of a host, read from
//     outside) lands only while its node is in a step: holding a slot
//     or a claim not reported lost, or recorded replacing or verifying.
//     It is judged at the instant the install child wrote it (its
//     Landed), against the first read of Consul after that instant: out
//     of any step there, with the node's record unchanged since before
//     the landing (every step writes a record at its end, with a new
//     since), the child outlived its step. A sample alone cannot tell:
//     its Docker and Consul reads are not one instant, and an install
//     that lands between them, just before a quick verify and release,
//     would look landed after. Landed and since are the same host's
//     clock: exec hosts run unskewed in containers of this kernel.
//   - Out of a step, the install is what the node's record says runs,
//     within recordLag.
//   - A replace hook that died of the nemesis' SIGTERM, which reaches an
//     exec host's agent and its hooks at once, is an interrupted step and
//     counts no failure (issue 25, item 6).
type execCheck struct {
	install  map[string]string     // node -> install ID at the last sample
	looks    map[string][]stepLook // node -> its last reads of Consul, oldest first
	mismatch map[string]time.Time  // node -> since when record and install differ, out of a step
}

// stepLook is one read of a node's step from Consul, as it was at some
// instant between from and to.
type stepLook struct {
	from, to time.Time
	in       bool      // in a step, or unknown: Consul out of reach
	since    time.Time // the node's record's, zero when it has none
	index    uint64    // the read's Consul index
}

// landMargin is how far past a record's since an install must land to be
// judged: a margin over the clock's reads, which are one host's.
const landMargin = 100 * time.Millisecond

// maxLooks bounds the reads kept per node: an install is seen at the
// first sample after it lands, so the two around it are among the last.
const maxLooks = 16

// checkHooks is invariant (e), for g if it is the hooks group.
func (ck *checker) checkHooks(g string, s *fleetwatch.Sample) {
	if g != hks {
		return
	}
	if ck.exec == nil {
		ck.exec = &execCheck{install: map[string]string{}, looks: map[string][]stepLook{}, mismatch: map[string]time.Time{}}
	}
	e, ws, gs := ck.exec, s.Workloads, s.State
	steps, recs := stepsOf(gs)
	if gs != nil {
		ck.checkTermFailures(gs)
	}
	for _, nd := range hookNodes {
		in := gs == nil || steps[nd]
		r := recs[nd]
		look := stepLook{from: s.StateFrom, to: s.StateTo, in: in, since: r.Since}
		if gs != nil {
			look.index = gs.Index
		}
		e.looks[nd] = append(e.looks[nd], look)
		if l := len(e.looks[nd]); l > maxLooks {
			e.looks[nd] = e.looks[nd][l-maxLooks:]
		}
		id := ws[nd].Managed
		if prev, ok := e.install[nd]; ok && id != "" && id != prev {
			landed, _ := execLanded(id)
			if a, b, out := outOfStep(e.looks[nd], landed); out {
				ck.n.violate("e install "+nd+" "+id, "(e) %s: install %s landed on %s at +%.3fs, out of any step: %.3fs after its record's since (%s %s, holding nothing), read %.3fs later (the read before: %.3fs before it): a hook's child outlived its step",
					g, id, nd, landed.Sub(ck.n.start).Seconds(), landed.Sub(b.since).Seconds(), r.State, coordinator.ShortSHA(r.SHA), b.from.Sub(landed).Seconds(), landed.Sub(a.to).Seconds())
			}
		}
		if prev := e.install[nd]; id != "" && id != prev {
			landed, _ := execLanded(id)
			ck.n.note("%s: %s installed %s by a hook started at +%.3fs, landed at +%.3fs", g, nd,
				coordinator.ShortSHA(ws[nd].SHAs[0]), ck.startOf(id), landed.Sub(ck.n.start).Seconds())
			e.install[nd] = id
		}
		ck.checkRecord(g, nd, ws[nd], r, in)
	}
}

// stepsOf reads, from gs, which nodes are in a step and each node's
// record. A claim whose session is gone still counts, and is its node's,
// until reported lost: an agent frozen mid-hook keeps its slot, and its
// hook's install lands within its step.
func stepsOf(gs *coordinator.GroupState) (map[string]bool, map[string]coordinator.NodeState) {
	steps, recs := map[string]bool{}, map[string]coordinator.NodeState{}
	if gs == nil {
		return steps, recs
	}
	if gs.Holders != nil {
		for _, c := range gs.Holders.Holding {
			steps[c.Name] = true
		}
		for name, c := range gs.Holders.Claims {
			steps[name] = steps[name] || !c.Lost
		}
	}
	for _, ns := range gs.Nodes {
		recs[ns.Node] = ns
		if ns.State == coordinator.StateReplacing || ns.State == coordinator.StateVerifying {
			steps[ns.Node] = true
		}
	}
	return steps, recs
}

// outOfStep finds, in looks, the first read of Consul after landed (b)
// and the one before it (a), and says whether b saw the node out of any
// step with a record written before the landing: no step was under way
// when it landed. A read older by its index than the one before it (a
// stale answer) gives no verdict.
func outOfStep(looks []stepLook, landed time.Time) (a, b stepLook, out bool) {
	if landed.IsZero() {
		return a, b, false
	}
	for i := 1; i < len(looks); i++ {
		a, b = looks[i-1], looks[i]
		if a.to.Before(landed) && landed.Before(b.from) {
			return a, b, !b.in && !b.since.IsZero() && b.index >= a.index && landed.After(b.since.Add(landMargin))
		}
	}
	return a, b, false
}

// checkRecord judges one exec host's install against its record, out of a
// step.
func (ck *checker) checkRecord(g, nd string, w workload, rec coordinator.NodeState, in bool) {
	e := ck.exec
	installed := ""
	if len(w.SHAs) == 1 {
		installed = w.SHAs[0]
	}
	if in || rec.Node == "" || installed == rec.SHA {
		delete(e.mismatch, nd)
		return
	}
	since, ok := e.mismatch[nd]
	if !ok {
		e.mismatch[nd] = time.Now()
		return
	}
	if time.Since(since) > recordLag {
		ck.n.violate("e record "+nd+" "+rec.SHA+" "+installed, "(e) %s: %s has %s installed, and its record says %s on %s, for %s out of any step",
			g, nd, coordinator.ShortSHA(installed), rec.State, coordinator.ShortSHA(rec.SHA), time.Since(since).Round(time.Second))
	}
}

// checkTermFailures is the last part of (e): no failure of an exec node
// is its replace hook killed by the nemesis' SIGTERM.
func (ck *checker) checkTermFailures(gs *coordinator.GroupState) {
	for _, f := range gs.Failures {
		if strings.Contains(f.Error, "signal: terminated") {
			ck.n.violate("e term "+f.Node+" "+f.SHA, "(e) %s: %s's failure of %s is its hook stopped with its agent, an interrupted step: %q",
				hks, f.Node, coordinator.ShortSHA(f.SHA), f.Error)
		}
	}
}

// convergedOn says every node of g runs sha, healthy, and is recorded
// converged on it.
func (n *nemesis) convergedOn(g, sha string) bool {
	if g == hks {
		return n.c.execConverged(sha)
	}
	return n.c.converged(g, n.nodesOf(g), sha)
}

// commitHooks is commit for the hooks group: the release is in the spec's
// env, which the replace hook reads. A bad commit's hook fails after its
// child's work, or installs a workload that is never healthy; a slow one
// draws installs on both sides of --hook-timeout, and one whose draw
// overruns it cannot converge.
func (n *nemesis) commitHooks(e event) error {
	n.c.nemesisGen++
	gen := n.c.nemesisGen
	release := []string{"v1", "v2", "v3"}[gen%3]
	env := map[string]string{"NEMESIS_GEN": strconv.Itoa(gen), forkhook.EnvInstall: installGood}
	switch e.kind {
	case opCommitBad:
		release = "bad"
		if gen%2 == 0 {
			env[forkhook.EnvFail], release = "1", "bad-hook"
		} else {
			env[forkhook.EnvUnhealthy] = "1"
		}
	case opCommitSlow:
		release += "-slow"
		env[forkhook.EnvInstall] = installSlow
	case opCommitTypo:
		// Nothing to pull on an exec host: a hook that fails fast.
		release, env[forkhook.EnvFail], env[forkhook.EnvInstall] = "typo", "1", installFail
	}
	spec := fleettest.Spec(n.t, fleettest.SpecOptions{Group: e.group, Image: "rollagent-it/forkhook:" + release,
		MaxParallel: kHooks, FailureAction: e.action, MaxFailures: e.maxF, HealthyDeadline: testHealthyDeadline, Env: env})
	spec.Update.BlockOn = gateBlocks()
	ordered(spec, e)
	ctx, cancel := n.c.ctx()
	defer cancel()
	res, err := n.c.store().Commit(ctx, e.group, spec, nemesisAuthor, "commit")
	if err != nil {
		return err
	}
	n.noteOrder(res.SHA, e)
	bad := e.kind == opCommitBad || e.kind == opCommitTypo || overruns(spec, res.SHA)
	n.mu.Lock()
	n.bad[res.SHA] = bad
	n.committed[res.SHA] = true
	n.mu.Unlock()
	n.note("committed %s to %s: %s (cannot converge: %v)", release, e.group, coordinator.ShortSHA(res.SHA), bad)
	return nil
}

// overruns says a node's install of spec, drawn as the hook draws it,
// may not end within --hook-timeout (a margin for the hook's own start).
func overruns(spec *hashspec.Spec, sha string) bool {
	lo, hi, err := forkhook.ParseRange(spec.Container.Env[forkhook.EnvInstall])
	if err != nil {
		return true
	}
	for _, nd := range hookNodes {
		if forkhook.Delay(lo, hi, sha, nd) > execHookTimeout-3*time.Second {
			return true
		}
	}
	return false
}

// startOf is when the hook of install id started, from the run's start.
func (ck *checker) startOf(id string) float64 {
	at, _ := execCreated(id)
	return at.Sub(ck.n.start).Seconds()
}
