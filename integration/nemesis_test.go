package integration

import (
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/fleettest"
)

const (
	nemesisDefault = 3 * time.Minute
	convergeBound  = 3 * time.Minute
	timelineCap    = 3000
)

// The nemesis runs each group at its own K: the managers one node at a
// time, the workers two of their three (the exec hosts' K is kHooks).
const (
	kManagers = 1
	kWorkers  = 2
)

// nemesisTest runs, for each seed of NEMESIS_SEEDS (or NEMESIS_SEED, or a
// random one), a seeded random schedule of operations against the
// cluster (commits of good, slow, bad and misspelt releases, cancels,
// rollbacks, operator pauses, resumes, the Consul check every commit
// blocks on flipped to critical and back; agents killed, stopped with SIGTERM, frozen past
// their session's TTL (a blip a live holder's claim outlasts) or past
// their lease; hosts killed or rebooted after a clean agent stop;
// workloads in a crash loop or frozen; partitions, a leader kill), with at
// most two faults at once, for NEMESIS_DURATION (default 3m); then it
// heals everything. Each seed's result is printed on a line of its own.
//
// Invariants, sampled every ~250ms from Docker's and Consul's own state
// (container lists, inspection and health, the group's KV tree and its
// nodes' checks), never from what the agents report about themselves,
// with K = max_parallel (1 for the managers, 2 for the workers):
//
// (a) Per group, let D be the nodes whose workload is unavailable: the
// container under the managed name absent, not running, or without
// Docker's health status "healthy" ("starting" and "unhealthy" are down,
// whatever the container was before). Every node counts, a holder dead
// mid-step and the nemesis' own victims too. Two sets are forgiven, each
// only where the rollout could not have prevented the overlap:
//
//   - N ⊆ D: nodes the nemesis itself took down (host killed or rebooted,
//     workload crashing or frozen) while they were in no rollout step
//     (one container, healthy, not holding a slot, record not replacing
//     or verifying), until seen up, or holding a slot, after the fault
//     ends. The rollout did not take them down, but it must count them:
//     they stand against K, and the bound is max(K, |N|), not K + |N|.
//     Only when the nemesis alone takes more than K down does the bound
//     grow, and then the rollout may take none down beside them.
//   - G ⊆ D \ N: nodes that were already down, or held a slot, at the
//     first sample that saw a node of N down (their step began before
//     the outage existed; a node of N that held one joins G, and counts
//     there once its own fault ends while its step runs), and nodes
//     granted a slot while the rollout was blind to that outage: before
//     Consul showed one of the outage node's checks not passing, and
//     within detectWindow of the outage. A reboot
//     opens no blind window: its agent's clean stop told the rollout
//     first. Each is forgiven until seen up and not holding.
//
// Then at every sample
//
//	|D| <= max(K, |N|) + |G|
//
// (b) Once the nemesis' cancel call for the desired SHA has returned (or,
// for a call that failed but was applied, from the first sample that
// sees the cancel record) until desired names another SHA, no container
// of the group is created later than fenceGap after that moment, by
// Docker's own Created time: the only step that may still run is one
// whose fence passed before the cancel, and it reaches Docker within the
// fence-to-step gap. A node that was in no step at the first sample keeps
// exactly its containers; a node in a step may finish or undo it (remove
// a container).
//
// (c) For the desired SHA: a pause record says failures == max_failures,
// failure_action is pause (or rollback, with no SHA fit to roll back to:
// coordinator.NoRollbackTarget), and as many failure records exist (one key
// per node: each failure counted once); and when max_failures records
// exist, the latest written after the SHA became desired, the pause or
// the rollback has been taken (they share the failure's transaction),
// unless that failure was written after a cancel of the SHA, which it
// then only records (README). An automatic rollback (desired written by
// another author than the tests) goes only to a SHA that had converged:
// every node of the group seen by Docker running it alone and healthy
// since the nemesis committed it (SHAs committed before the run are not
// judged: the checker did not see them run).
//
// (d) Once healed, each group converges within 3 minutes on its desired
// SHA; a desired SHA that is cancelled, paused, bad or has failed nodes
// is first replaced by a fresh commit of a good release.
//
// (f) No grant while the gate is closed, from Consul's indexes: none in a
// group between an operator's pause and the resume, none of a SHA between
// a failure pause of it and its resume or after a cancel of it; none of a
// nemesis commit while the check it blocks on is critical, unless the
// agent's health read right before the grant came before the flip (see
// judgeGate in nemesis_gate_judge_test.go).
//
// (g) No node that is not a canary of a commit with update.canary is
// granted a slot for its SHA before a promotion of that rollout: a
// promote (the schedule's, or the heal's), or a rollback, which promotes
// in its own transaction, written after the SHA's latest commit and
// before the grant, by their Consul indexes. Under auto_promote, a grant
// with no promotion must come after a record of every canary converged on
// the SHA since that commit; the canary_healthy_time an evaluator waits on
// its own clock, and that no canary went down meanwhile, are not judged
// (no record says when an evaluator promoted).
//
// (h) No node of the workers is granted a slot for a commit with
// update.after = [managers] unless the managers were converged on their
// own desired SHA (desired record and every manager's record, as the
// watch saw their versions) at some index between that commit and the
// grant. The gate reads the named group at each look and every 2s in
// line, not in the grant's transaction, so a grant whose managers moved
// away after that read is counted as having raced, not as a violation;
// the report says how many did (see judgeAfterGrant).
//
// The third group, hooks (K=1), runs the exec runtime with hooks that fork
// (internal/forkhook): there a node's "container" is its install, read
// from outside, and its health is the health hook's own check run from
// the test; (a)-(d) judge it as they judge containers, and (e), in
// nemesis_exec_check_test.go, checks that no hook's child outlives its
// step.
func (c *cluster) nemesisTest(t *testing.T) {
	seeds, dur := nemesisConfig(t)
	c.hooksUp()
	var results []string
	for _, seed := range seeds {
		res := fmt.Sprintf("nemesis seed %d: did not finish", seed)
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { res = c.nemesisRun(t, seed, dur) })
		results = append(results, res)
	}
	c.verdicts = append(c.verdicts, results...)
	// One line per seed, on stdout, after every run's log.
	fmt.Println(strings.Join(results, "\n"))
}

func (c *cluster) nemesisRun(t *testing.T, seed uint64, dur time.Duration) string {
	t.Logf("NEMESIS_SEED=%d NEMESIS_DURATION=%s K: %s=%d %s=%d %s=%d", seed, dur, mgrs, kManagers, wkrs, kWorkers, hks, kHooks)
	n := &nemesis{c: c, t: t, seed: seed, dur: dur, f: newFaults(), bad: map[string]bool{}, committed: map[string]bool{},
		cancelled: map[string]time.Time{}, vseen: map[string]int{}, orders: map[string]orderOf{}}
	for _, r := range []string{"v1", "v2", "v3"} {
		c.releases.Image(r, nil)
	}
	c.releases.Image("bad", map[string]string{"DEMOAPP_UNHEALTHY": "1"})
	n.skewClocks()
	nodes := append(append(append([]string{}, managers...), workers...), hookNodes...)
	sched := schedule(seed, dur, nemesisGroups(), nodes)
	var plan []string
	for _, e := range sched {
		plan = append(plan, e.String())
	}
	t.Logf("schedule of seed %d:\n%s", seed, strings.Join(plan, "\n"))
	n.start = time.Now()
	n.gw = n.watchGate()
	t.Cleanup(n.gw.stop)
	if err := n.registerGate(); err != nil {
		t.Fatal(err)
	}
	ck := n.check()
	t.Cleanup(ck.stop)
	t.Cleanup(n.healAll) // a run cut short leaves no crash loop, frozen process, node down or check critical
	n.run(sched)
	n.healAll()
	n.note("faults stopped and healed")
	n.converge()
	ck.stop()
	n.gw.stop()
	return n.report(ck.samples(), n.judgeGate()+"; "+n.judgeOrders())
}

// nemesisConfig reads NEMESIS_SEEDS (seeds separated by spaces or commas,
// or "xN" for N random ones), NEMESIS_SEED (one) and NEMESIS_DURATION.
func nemesisConfig(t *testing.T) ([]uint64, time.Duration) {
	spec := os.Getenv("NEMESIS_SEEDS")
	if spec == "" {
		spec = os.Getenv("NEMESIS_SEED")
	}
	var seeds []uint64
	if count, ok := strings.CutPrefix(spec, "x"); ok {
		k, err := strconv.Atoi(count)
		if err != nil || k < 1 || k > 100 {
			t.Fatalf("NEMESIS_SEEDS=%q: want xN with N from 1 to 100", spec)
		}
		for range k {
			seeds = append(seeds, rand.Uint64()%1e9)
		}
		spec = ""
	}
	for _, s := range strings.FieldsFunc(spec, func(r rune) bool { return r == ' ' || r == ',' }) {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("NEMESIS_SEEDS=%q: %v", spec, err)
		}
		seeds = append(seeds, v)
	}
	if len(seeds) == 0 {
		seeds = []uint64{rand.Uint64() % 1e9}
	}
	dur := nemesisDefault
	if s := os.Getenv("NEMESIS_DURATION"); s != "" {
		v, err := time.ParseDuration(s)
		if err != nil || v <= 0 {
			t.Fatalf("NEMESIS_DURATION=%q: %v", s, err)
		}
		dur = v
	}
	return seeds, dur
}

// nemesis is one run: its schedule's state, the timeline and the
// violations found.
type nemesis struct {
	c     *cluster
	t     *testing.T
	seed  uint64
	dur   time.Duration
	start time.Time
	f     *faults

	mu         sync.Mutex
	bad        map[string]bool      // SHA -> a release that cannot converge
	committed  map[string]bool      // SHAs the nemesis committed
	cancelled  map[string]time.Time // SHA -> when the nemesis' cancel of it returned
	timeline   []string
	violations []string
	vseen      map[string]int

	gw          *gateWatch // the gate check's flips and the grants, for (f)
	gateStart   uint64     // the Consul index of the run's start (registerGate)
	pauseCalls  int        // the nemesis' pause calls that returned without an error
	resumeCalls int        // and resume calls

	orders       map[string]orderOf // SHA -> how a nemesis commit moves, for (g) and (h)
	promoteCalls int                // the nemesis' promote calls that promoted
	awaitSamples int                // samples that saw a group awaiting promotion
	afterSamples int                // and waiting for another group (update.after)
}

// k is the max_parallel of group's nemesis commits.
func (n *nemesis) k(group string) int {
	switch group {
	case mgrs:
		return kManagers
	case hks:
		return kHooks
	}
	return kWorkers
}

// note adds a line to the timeline.
func (n *nemesis) note(format string, args ...any) {
	line := fmt.Sprintf("+%6.1fs ", time.Since(n.start).Seconds()) + fmt.Sprintf(format, args...)
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.timeline) < timelineCap {
		n.timeline = append(n.timeline, line)
	}
}

// violate records a violation once per key, and puts it on the timeline.
func (n *nemesis) violate(key, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	n.mu.Lock()
	n.vseen[key]++
	first := n.vseen[key] == 1
	if first {
		n.violations = append(n.violations, fmt.Sprintf("+%.1fs %s", time.Since(n.start).Seconds(), msg))
	}
	n.mu.Unlock()
	if first {
		n.note("VIOLATION %s", msg)
	}
}

// run applies the schedule in time, each event at its offset.
func (n *nemesis) run(sched []event) {
	for _, e := range sched {
		if d := time.Until(n.start.Add(e.at)); d > 0 {
			time.Sleep(d) // bounded: the schedule ends at its duration
		}
		n.step(e)
	}
}

func (n *nemesis) step(e event) {
	if err := n.apply(e); err != nil {
		n.note("%s: %v", e.kind+" "+e.node+e.group, err)
		return
	}
	n.note("%s", strings.TrimSpace(e.String()[strings.Index(e.String(), "s ")+2:]))
}

// report fails the test with the seed, the violations and the timeline,
// and returns the seed's result in one line.
func (n *nemesis) report(samples int, gate string) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.t.Logf("nemesis seed %d: %d samples, %d violation(s); %s", n.seed, samples, len(n.violations), gate)
	head := fmt.Sprintf("nemesis seed %d (%s, K %d/%d/%d, %d samples; %s):", n.seed, n.dur, kManagers, kWorkers, kHooks, samples, gate)
	if len(n.violations) == 0 {
		if os.Getenv("NEMESIS_TIMELINE") != "" {
			n.t.Logf("timeline of seed %d:\n%s", n.seed, strings.Join(n.timeline, "\n"))
		}
		return head + " no violations"
	}
	// The agents' logs as they are at the violation: the subtest's cleanup
	// starts them again, and the cluster's own dump then shows only that.
	n.c.logAgents(n.t, "2000")
	var keys []string
	for k, v := range n.vseen {
		keys = append(keys, fmt.Sprintf("%s x%d", k, v))
	}
	sort.Strings(keys)
	n.t.Errorf("nemesis seed %d (NEMESIS_SEED=%d to replay) broke the invariants:\n%s\nsamples in violation: %s\ntimeline:\n%s",
		n.seed, n.seed, strings.Join(n.violations, "\n"), strings.Join(keys, ", "), strings.Join(n.timeline, "\n"))
	return fmt.Sprintf("%s %d violation(s): %s", head, len(n.violations), strings.Join(n.violations, " | "))
}

// converge checks (d): once healed, every group converges on its desired
// SHA, after a fresh good commit where that SHA cannot converge.
func (n *nemesis) converge() {
	deadline := time.Now().Add(convergeBound)
	for pass := 0; pass < 4; pass++ {
		want := map[string]string{}
		for _, g := range nemesisGroups() {
			want[g] = n.settle(g)
		}
		moved := false
		ok := fleettest.Poll(time.Until(deadline), func() bool {
			done := true
			for g, sha := range want {
				if gs := n.c.state(g); gs.Desired == nil || gs.Desired.SHA != sha || gs.Pause != nil {
					// Moved, or paused by a failure that landed after
					// settle read it (a step of the SHA mid-verify at the
					// heal): it cannot converge, settle again.
					moved = true
				} else if !n.convergedOn(g, sha) {
					done = false
				}
			}
			return moved || done
		})
		if moved {
			n.note("final: desired moved, or failures paused a group, while converging; settling again")
			continue
		}
		for g, sha := range want {
			if !ok && !n.convergedOn(g, sha) {
				n.violate("d "+g, "%s did not converge on %s within %s of the heal: %s", g, coordinator.ShortSHA(sha), convergeBound, n.describe(g))
			}
		}
		n.note("final: converged: %v", ok)
		return
	}
	n.violate("d moves", "desired kept moving after the heal")
}

// settle returns the SHA group must converge on, committing a good
// release first when the desired one cannot converge.
func (n *nemesis) settle(g string) string {
	gs := n.c.state(g)
	failed := gs.Pause != nil || len(gs.Failures) > 0 // a resume forgets them
	if gs.OperatorPause != nil {
		// The nemesis' pause holds the group until its resume: a new
		// commit does not lift it.
		n.step(event{kind: opResume, group: g})
		gs = n.c.state(g)
	}
	if gs.Spec != nil && gs.Spec.Update.Canary > 0 && gs.Promoted == nil && gs.Cancel == nil {
		// An operator ends a canary stage: the rest follow, or the
		// canaries' failures pause or roll back as for any node.
		n.step(event{kind: opPromote, group: g})
		gs = n.c.state(g)
	}
	why := ""
	n.mu.Lock()
	bad := gs.Desired != nil && n.bad[gs.Desired.SHA]
	n.mu.Unlock()
	switch {
	case gs.Desired == nil:
		why = "unreadable"
	case gs.Cancel != nil || gs.Pause != nil || !gs.Gate().Open:
		why = "gate closed: " + gs.Gate().Reason
	case bad:
		why = "a bad release"
	case len(gs.Failures) > 0:
		why = fmt.Sprintf("%d failed node(s)", len(gs.Failures))
	case failed:
		why = "failed nodes, before the resume of its pause"
	}
	if why == "" {
		return gs.Desired.SHA
	}
	n.note("final: %s's desired is %s; committing a good release", g, why)
	n.step(event{kind: opCommit, group: g, action: "pause", maxF: 1})
	if gs = n.c.state(g); gs.Desired != nil {
		return gs.Desired.SHA
	}
	return ""
}

func (n *nemesis) nodesOf(g string) []string {
	switch g {
	case mgrs:
		return managers
	case hks:
		return hookNodes
	}
	return workers
}

// describe says where each node of g stands, for a violation.
func (n *nemesis) describe(g string) string {
	ws, _ := n.c.listWorkloads(g)
	gs := n.c.state(g)
	recs := map[string]string{}
	for _, ns := range gs.Nodes {
		recs[ns.Node] = fmt.Sprintf("%s on %s %q", ns.State, coordinator.ShortSHA(ns.SHA), ns.Error)
	}
	var parts []string
	// The failures that hold the gate say which step failed and why.
	for _, f := range gs.Failures {
		parts = append(parts, fmt.Sprintf("failure of %s on %s at %s: %q", coordinator.ShortSHA(f.SHA), f.Node,
			f.At.Format("15:04:05.000"), f.Error))
	}
	for _, nd := range n.nodesOf(g) {
		var shas []string
		for _, s := range ws[nd].SHAs {
			shas = append(shas, coordinator.ShortSHA(s))
		}
		parts = append(parts, fmt.Sprintf("%s: containers %v healthy=%v, record %s", nd, shas, ws[nd].Healthy, recs[nd]))
	}
	return strings.Join(parts, "; ")
}
