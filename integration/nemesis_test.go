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

// nemesisTest runs a seeded random schedule of operations against the
// cluster (commits of good and bad releases, cancels, rollbacks, resumes,
// agent kills, whole-node kills, partitions, a leader kill), with at most
// two faults at once, for NEMESIS_DURATION (default 3m); then it heals
// everything. NEMESIS_SEED replays a schedule; the seed is logged first.
//
// Invariants, sampled every ~250ms from Docker's and Consul's own state
// (container lists and health, the group's KV tree), never from what the
// agents report about themselves, with K = max_parallel = 1:
//
// (a) Per group, let D be the nodes whose workload is down: the container
// under the managed name absent, not running, or not seen healthy by
// Docker since it last started (a container seen healthy that keeps
// running is up through a failed probe: see upTracker). Let N ⊆ D be the
// nodes the nemesis itself killed while they were in no rollout step
// (one container, running, not holding the slot, record not replacing or
// verifying), until seen up or holding the slot after their revival; and
// G ⊆ D \ N the nodes that were down, or held the slot, at the moment the
// nemesis killed a node of N, until seen up. Then at every sample
//
//	|D| <= max(K, |N|) + |G|
//
// A holder killed mid-replacement (whole node or agent alone) is not in N:
// it is down because of the rollout and counts against K, so no second
// node may go down beside it. A node of N counts too: the rollout must not
// take another node down beside it. G only forgives the overlap the
// nemesis made by killing an idle node while another was already in its
// step, or that a grant made within detectWindow of that kill, before
// Consul's failure detectors could tell anyone: neither can a rollout
// prevent.
//
// (b) From the first sample where desired names a SHA with a cancel
// record until desired names another SHA, no container of the group is
// created, and a node that was in no step at that sample keeps exactly
// its containers. A node in a step then may finish or undo it (remove a
// container), and within 2s may still create the container its last
// fence before the cancel allowed.
//
// (c) For the desired SHA: a pause record says failures == max_failures,
// failure_action is pause (or rollback, with no SHA fit to roll back to:
// coordinator.NoRollbackTarget), and as many failure records exist (one key
// per node: each failure counted once); and when max_failures records
// exist, the latest written after the SHA became desired, the pause or
// the rollback has been taken (they share the failure's transaction),
// unless that failure was written after a cancel of the SHA, which it
// then only records (README).
//
// (d) Once healed, each group converges within 3 minutes on its desired
// SHA; a desired SHA that is cancelled, paused, bad or has failed nodes
// is first replaced by a fresh commit of a good release.
func (c *cluster) nemesisTest(t *testing.T) {
	seed, dur := nemesisConfig(t)
	t.Logf("NEMESIS_SEED=%d NEMESIS_DURATION=%s", seed, dur)
	n := &nemesis{c: c, t: t, seed: seed, f: newFaults(), bad: map[string]bool{}, vseen: map[string]int{}}
	for _, r := range []string{"v1", "v2", "v3"} {
		c.releases.Image(r, nil)
	}
	c.releases.Image("bad", map[string]string{"DEMOAPP_UNHEALTHY": "1"})
	nodes := append(append([]string{}, managers...), workers...)
	sched := schedule(seed, dur, []string{mgrs, wkrs}, nodes)
	var plan []string
	for _, e := range sched {
		plan = append(plan, e.String())
	}
	t.Logf("schedule of seed %d:\n%s", seed, strings.Join(plan, "\n"))
	n.start = time.Now()
	ck := n.check()
	t.Cleanup(ck.stop)
	n.run(sched)
	n.healAll()
	n.note("faults stopped and healed")
	n.converge()
	ck.stop()
	n.report(ck.samples())
}

// nemesisConfig reads NEMESIS_SEED and NEMESIS_DURATION.
func nemesisConfig(t *testing.T) (uint64, time.Duration) {
	seed := rand.Uint64() % 1e9
	if s := os.Getenv("NEMESIS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("NEMESIS_SEED=%q: %v", s, err)
		}
		seed = v
	}
	dur := nemesisDefault
	if s := os.Getenv("NEMESIS_DURATION"); s != "" {
		v, err := time.ParseDuration(s)
		if err != nil || v <= 0 {
			t.Fatalf("NEMESIS_DURATION=%q: %v", s, err)
		}
		dur = v
	}
	return seed, dur
}

// nemesis is one run: its schedule's state, the timeline and the
// violations found.
type nemesis struct {
	c     *cluster
	t     *testing.T
	seed  uint64
	start time.Time
	f     *faults

	mu         sync.Mutex
	gen        int             // commits so far
	bad        map[string]bool // SHA -> a bad release
	timeline   []string
	violations []string
	vseen      map[string]int
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

// report fails the test with the seed, the violations and the timeline.
func (n *nemesis) report(samples int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.t.Logf("nemesis seed %d: %d samples, %d commits, %d violation(s)", n.seed, samples, n.gen, len(n.violations))
	if len(n.violations) == 0 {
		return
	}
	var keys []string
	for k, v := range n.vseen {
		keys = append(keys, fmt.Sprintf("%s x%d", k, v))
	}
	sort.Strings(keys)
	n.t.Errorf("nemesis seed %d (NEMESIS_SEED=%d to replay) broke the invariants:\n%s\nsamples in violation: %s\ntimeline:\n%s",
		n.seed, n.seed, strings.Join(n.violations, "\n"), strings.Join(keys, ", "), strings.Join(n.timeline, "\n"))
}

// converge checks (d): once healed, every group converges on its desired
// SHA, after a fresh good commit where that SHA cannot converge.
func (n *nemesis) converge() {
	deadline := time.Now().Add(convergeBound)
	for pass := 0; pass < 4; pass++ {
		want := map[string]string{}
		for _, g := range []string{mgrs, wkrs} {
			want[g] = n.settle(g)
		}
		moved := false
		ok := fleettest.Poll(time.Until(deadline), func() bool {
			done := true
			for g, sha := range want {
				if gs := n.c.state(g); gs.Desired == nil || gs.Desired.SHA != sha {
					moved = true
				} else if !n.c.converged(g, n.nodesOf(g), sha) {
					done = false
				}
			}
			return moved || done
		})
		if moved {
			n.note("final: desired moved while converging; settling again")
			continue
		}
		for g, sha := range want {
			if !ok && !n.c.converged(g, n.nodesOf(g), sha) {
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
	if g == mgrs {
		return managers
	}
	return workers
}

// describe says where each node of g stands, for a violation.
func (n *nemesis) describe(g string) string {
	ws := n.c.workloads(g)
	recs := map[string]string{}
	for _, ns := range n.c.state(g).Nodes {
		recs[ns.Node] = fmt.Sprintf("%s on %s %q", ns.State, coordinator.ShortSHA(ns.SHA), ns.Error)
	}
	var parts []string
	for _, nd := range n.nodesOf(g) {
		var shas []string
		for _, s := range ws[nd].SHAs {
			shas = append(shas, coordinator.ShortSHA(s))
		}
		parts = append(parts, fmt.Sprintf("%s: containers %v healthy=%v, record %s", nd, shas, ws[nd].Healthy, recs[nd]))
	}
	return strings.Join(parts, "; ")
}
