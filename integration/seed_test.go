package integration

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/fleettest"
	"github.com/rollagent/rollagent/internal/fleetwatch"
)

const (
	// seedDowntime is how long the seed's victim stays dead: long enough
	// for its Consul session to be invalidated (TTL 3s) and a slot passed
	// on, short of the lease (healthy_deadline plus grace).
	seedDowntime = 15 * time.Second
	// partitionFor is shorter than the lease too, so the victim's claim
	// must hold through it.
	partitionFor = 20 * time.Second
	// leaseSlack bounds the lease beyond healthy_deadline (a second
	// healthy_deadline, the Docker runtime's 2 min pull bound and 30 s
	// step bound, and 30 s of grace, README), timed from when the next
	// waiter sees the dead node's session gone, plus how long Consul takes
	// to end it: the failure of a node that never comes back must be
	// recorded within it.
	leaseSlack = 4 * time.Minute
)

// seed is the InfraKit failure: the process driving the update dies
// mid-replacement, here with its whole node (agent, Consul client and
// workload). The slot belongs to the node, so until it is back no other
// manager may be taken down: at most K=1 unhealthy, counting the victim.
func (c *cluster) seed(t *testing.T) {
	defer c.judgeDown(t)()
	start := time.Now()
	ms, ws := c.commit(mgrs, "v2", "pause"), c.commit(wkrs, "v2", "pause")
	victim := c.midStep(mgrs, time.Minute)
	c.killNode(victim)
	t.Logf("killed %s: %q", victim, c.workloads(mgrs)[victim].Status)
	if taken := c.watchOthers(mgrs, victim, seedDowntime); taken != "" {
		t.Errorf("while %s, killed mid-replacement, was down: %s", victim, taken)
	}
	c.reviveNode(victim)
	c.waitConverged(mgrs, managers, ms, 3*time.Minute)
	c.waitConverged(wkrs, workers, ws, 3*time.Minute)
	t.Logf("killed %s mid-replacement for %s; all 6 nodes on v2 %s after the commit", victim, seedDowntime,
		time.Since(start).Round(100*time.Millisecond))
}

// holderLost kills the holder's node for good. Its claim counts until the
// next node in line has watched it orphaned for its whole lease; then the
// node is recorded failed with a reason naming it, and failure_action=pause
// closes the gate. No other manager is taken down meanwhile. Revived under
// the pause, it moves nothing until the operator resumes.
func (c *cluster) holderLost(t *testing.T) {
	defer c.judgeDown(t)()
	sha := c.commit(mgrs, "v2-lost", "pause")
	victim := c.midStep(mgrs, time.Minute)
	granted := c.grantedAt(mgrs, victim)
	c.killNode(victim)
	deadline := testHealthyDeadline + leaseSlack
	var f *coordinator.Failure
	taken := c.watchOthersUntil(mgrs, victim, time.Until(granted.Add(deadline)), func() bool {
		f = c.failureOf(mgrs, sha, victim)
		return f != nil
	})
	if taken != "" {
		t.Errorf("while %s was lost mid-replacement: %s", victim, taken)
	}
	c.checkLost(t, sha, victim, granted, f)
	c.reviveNode(victim)
	// Under the pause nothing destructive runs, the victim's undo included
	// (README, "Nothing moves after a CANCEL"): back, it keeps its slot
	// while down. The operator's resume opens the gate, and only then is it
	// made whole, under that slot.
	ctx, cancel := c.ctx()
	defer cancel()
	if _, err := c.store().Resume(ctx, mgrs); err != nil {
		t.Fatalf("resume: %v", err)
	}
	c.waitFor(2*time.Minute, "every manager serving one healthy workload again", func() bool {
		ws := c.workloads(mgrs)
		for _, n := range managers {
			if !ws[n].Healthy || len(ws[n].IDs) != 1 {
				return false
			}
		}
		return true
	})
}

// checkLost checks the failure recorded for a lost holder and the pause.
func (c *cluster) checkLost(t *testing.T, sha, victim string, granted time.Time, f *coordinator.Failure) {
	t.Helper()
	if f == nil {
		t.Errorf("no failure recorded under failures/%s/%s within healthy_deadline %s + %s of the grant",
			coordinator.ShortSHA(sha), victim, testHealthyDeadline, leaseSlack)
		return
	}
	after := f.At.Sub(granted)
	t.Logf("%s recorded failed %s after its grant: %q", victim, after.Round(100*time.Millisecond), f.Error)
	if !strings.Contains(f.Error, victim) {
		t.Errorf("the failure of %s does not name it: %q", victim, f.Error)
	}
	if after < testHealthyDeadline-time.Second {
		t.Errorf("%s recorded failed %s after its grant, before healthy_deadline %s ran out", victim, after, testHealthyDeadline)
	}
	var gs *coordinator.GroupState
	fleettest.Poll(10*time.Second, func() bool { gs = c.state(mgrs); return gs.Pause != nil })
	if gs.Pause == nil || gs.Pause.SHA != sha || gs.Gate().Open {
		t.Errorf("managers not paused on %s after the lost holder's failure: pause %+v, gate %+v",
			coordinator.ShortSHA(sha), gs.Pause, gs.Gate())
		return
	}
	t.Logf("managers paused: %s", gs.Gate().Reason)
}

// midStep waits until a node of group holds the slot with its old
// container set aside (two containers under its name): mid-replacement.
func (c *cluster) midStep(group string, d time.Duration) string {
	c.t.Helper()
	node := ""
	c.waitFor(d, "a holder in "+group+" mid-replacement", func() bool {
		holding, err := c.holding(group)
		if err != nil {
			return false
		}
		ws := c.workloads(group)
		for _, e := range holding {
			if len(ws[e.Name].IDs) == 2 {
				node = e.Name
				return true
			}
		}
		return false
	})
	return node
}

// grantedAt is when node's hold began, from the holders record.
func (c *cluster) grantedAt(group, node string) time.Time {
	if holding, err := c.holding(group); err == nil {
		for _, e := range holding {
			if e.Name == node && !e.Since.IsZero() {
				return e.Since
			}
		}
	}
	return time.Now()
}

func (c *cluster) failureOf(group, sha, node string) *coordinator.Failure {
	for _, f := range c.state(group).Failures {
		if f.SHA == sha && f.Node == node {
			return &f
		}
	}
	return nil
}

// watchOthers watches group for d while victim is down and returns the
// first sign that another node was taken down: granted the slot, a
// container of it created or removed, or its workload unhealthy.
func (c *cluster) watchOthers(group, victim string, d time.Duration) string {
	return c.watchOthersUntil(group, victim, d, func() bool { return false })
}

// watchOthersUntil is watchOthers that stops early once done says so.
func (c *cluster) watchOthersUntil(group, victim string, d time.Duration, done func() bool) string {
	var others []string
	for n, g := range c.nodes {
		if g == group && n != victim {
			others = append(others, n)
		}
	}
	before := c.workloads(group)
	start, first := time.Now(), ""
	fleettest.Poll(d, func() bool {
		if msg := c.othersMoved(group, victim, others, before); msg != "" && first == "" {
			first = fmt.Sprintf("+%s: %s", time.Since(start).Round(100*time.Millisecond), msg)
		}
		return done()
	})
	return first
}

func (c *cluster) othersMoved(group, victim string, others []string, before map[string]workload) string {
	if holding, err := c.holding(group); err == nil {
		for _, e := range holding {
			if e.Name != victim {
				return e.Name + " was granted the slot"
			}
		}
	}
	ws, err := fleettest.ListWorkloads(c.docker, group)
	if err != nil {
		return ""
	}
	for _, n := range others {
		if !reflect.DeepEqual(ws[n].IDs, before[n].IDs) {
			return fmt.Sprintf("%s's containers changed: %.12v -> %.12v", n, before[n].IDs, ws[n].IDs)
		}
	}
	if down, why := fleetwatch.DownOf(ws, others, fleetwatch.Unhealthy); len(down) > 0 {
		return fmt.Sprintf("down: %s", strings.Join(why, "; "))
	}
	return ""
}
