package integration

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/dockertest"
	"github.com/rollagent/rollagent/internal/fleettest"
)

// seedOrder is the seed's fleet rolled in its operator's order (issue 29):
// the managers one at a time with update.last on a leader check, which the
// test registers on one manager and moves to another of its choosing, then
// the workers (update.after the managers), K=1 each, with the holder's
// node killed mid-replacement once. Judged from Consul's records (the
// grants' and the node records' indexes) and Docker's own state: no worker
// granted before the last manager converged, the leader's node last, and
// never two managers down (the monitor, Docker's health status).
func (c *cluster) seedOrder(t *testing.T) {
	defer c.judgeDown(t)()
	check := "seed-leader-" + dockertest.RunID()[:6]
	perm := rand.Perm(len(managers))
	first, leader := managers[perm[0]], managers[perm[1]]
	t.Cleanup(func() {
		for _, m := range managers {
			_ = c.dropLeaderCheck(m, check) // absent on most: nothing to undo there
		}
	})
	c.moveLeaderCheck("", first, check)
	c.moveLeaderCheck(first, leader, check)
	t.Logf("leader check %s moved from %s to %s", check, first, leader)
	gw := c.watchGrants(mgrs, wkrs)
	defer gw.stop()
	start := time.Now()
	ms := c.commitOrdered(mgrs, func(u *hashspec.Update) { u.Last = &hashspec.Last{Check: check} })
	ws := c.commitOrdered(wkrs, func(u *hashspec.Update) { u.After = []string{mgrs} })
	dw := c.watchOrder(map[string]string{mgrs: ms, wkrs: ws})
	defer dw.stop()
	victim := c.midStep(mgrs, time.Minute)
	c.killNode(victim)
	t.Logf("killed %s mid-replacement", victim)
	if taken := c.watchOthers(mgrs, victim, seedDowntime); taken != "" {
		t.Errorf("while %s, killed mid-replacement, was down: %s", victim, taken)
	}
	c.reviveNode(victim)
	c.waitConverged(mgrs, managers, ms, 3*time.Minute)
	c.waitConverged(wkrs, workers, ws, 3*time.Minute)
	dw.stop()
	gw.stop()
	c.judgeSeedOrder(t, gw, dw, leader, ms)
	t.Logf("managers, leader %s last, then workers, on the new SHAs %s after the commits", leader,
		time.Since(start).Round(100*time.Millisecond))
}

// commitOrdered commits a release of its own to group, its update block
// edited by order.
func (c *cluster) commitOrdered(group string, order func(*hashspec.Update)) string {
	c.t.Helper()
	spec := fleettest.Spec(c.t, fleettest.SpecOptions{Group: group, Image: c.releases.Image("v2", nil),
		Env: map[string]string{"SEED_ORDER": "1"}, MaxParallel: 1, FailureAction: "pause", MaxFailures: 1,
		HealthyDeadline: testHealthyDeadline, ProbeTimeout: probeTimeout, ProbeRetries: probeRetries})
	order(&spec.Update)
	ctx, cancel := c.ctx()
	defer cancel()
	res, err := c.store().Commit(ctx, group, spec, testAuthor, "seed order")
	if err != nil {
		c.t.Fatal(err)
	}
	return res.SHA
}

// judgeSeedOrder gathers the facts the watches saw and judges them.
func (c *cluster) judgeSeedOrder(t *testing.T, gw *gateWatch, dw *orderWatch, leader, ms string) {
	f := orderFacts{mgrs: mgrs, wkrs: wkrs, managers: managers, workers: workers, leader: leader,
		converged: map[string]uint64{}}
	gw.mu.Lock()
	for _, g := range gw.grants {
		f.grants = append(f.grants, g)
	}
	for _, m := range managers {
		if idx, ok := gw.convergedAt(mgrs, m, ms); ok {
			f.converged[m] = idx
		}
	}
	gw.mu.Unlock()
	slices.SortFunc(f.grants, func(a, b *grantSeen) int { return cmp.Compare(a.index, b.index) })
	dw.mu.Lock()
	f.notYet, f.up, f.created = dw.notYet, dw.up, dw.created
	holds, waits := dw.afterHolds, dw.lastWaits
	dw.mu.Unlock()
	bad, notes := judgeOrder(f)
	for _, n := range notes {
		t.Log(n)
	}
	for _, v := range bad {
		t.Error(v)
	}
	if holds == 0 {
		t.Errorf("no read of the workers showed them %s: the order was not exercised", coordinator.GateWaitingForGroup)
	}
	var seen []string
	for _, g := range f.grants {
		seen = append(seen, fmt.Sprintf("%s@%d", g.node, g.index))
	}
	t.Logf("grants %v (%d reads of the workers waiting for the managers, %d of the leader waiting to go last); managers converged at indexes %v",
		seen, holds, waits, f.converged)
}

// convergedAt is the index of the first record of node the watch saw
// converged on sha. The caller holds w.mu.
func (w *gateWatch) convergedAt(group, node, sha string) (uint64, bool) {
	var first uint64
	for key, ns := range w.records {
		parts := strings.Split(key, "/") // group/node/index, as nodesSeen keys them
		idx, err := strconv.ParseUint(parts[len(parts)-1], 10, 64)
		if err != nil || len(parts) != 3 || parts[0] != group || parts[1] != node || ns.SHA != sha || ns.State != coordinator.StateConverged {
			continue
		}
		if first == 0 || idx < first {
			first = idx
		}
	}
	return first, first != 0
}

// orderWatch reads the workloads of the seed's groups from Docker, about
// every 200ms, for judgeOrder, and the groups' gates from Consul, to count
// the order's holds.
type orderWatch struct {
	c      *cluster
	shas   map[string]string // group -> its new SHA
	cancel context.CancelFunc
	done   chan struct{}

	mu                    sync.Mutex
	notYet, up, created   map[string]time.Time
	inspected             map[string]bool
	afterHolds, lastWaits int
}

func (c *cluster) watchOrder(shas map[string]string) *orderWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &orderWatch{c: c, shas: shas, cancel: cancel, done: make(chan struct{}), notYet: map[string]time.Time{},
		up: map[string]time.Time{}, created: map[string]time.Time{}, inspected: map[string]bool{}}
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			w.read()
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return w
}

// stop ends the watch; it may be called twice.
func (w *orderWatch) stop() {
	w.cancel()
	<-w.done
}

func (w *orderWatch) read() {
	for group, sha := range w.shas {
		begin := time.Now()
		ws, err := w.c.listWorkloads(group)
		end := time.Now()
		if err != nil {
			continue
		}
		w.mu.Lock()
		for node, wl := range ws {
			if group == mgrs && w.up[node].IsZero() {
				if fleettest.Running(ws, []string{node}, sha) {
					w.up[node] = end
				} else {
					w.notYet[node] = begin
				}
			}
			w.noteCreated(node, wl, sha)
		}
		w.mu.Unlock()
	}
	wg, mg := w.c.state(wkrs).Gate(), w.c.state(mgrs)
	w.mu.Lock()
	if wg.State == coordinator.GateWaitingForGroup {
		w.afterHolds++
	}
	if len(mg.LastWaiters()) > 0 {
		w.lastWaits++
	}
	w.mu.Unlock()
}

// noteCreated keeps Docker's Created time of node's first container of
// sha. The caller holds w.mu.
func (w *orderWatch) noteCreated(node string, wl workload, sha string) {
	for i, id := range wl.IDs {
		if wl.SHAs[i] != sha || w.inspected[id] {
			continue
		}
		at, err := w.c.created(id)
		if err != nil {
			continue
		}
		w.inspected[id] = true
		if prev, ok := w.created[node]; !ok || at.Before(prev) {
			w.created[node] = at
		}
	}
}
