package integration

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/fleettest"
)

const (
	nemesisK     = 1 // every spec the cluster tests commit has max_parallel 1
	cancelGrace  = 2 * time.Second
	sampleEvery  = 250 * time.Millisecond
	consulBudget = 5 * time.Second
)

// checker samples Docker and Consul and checks invariants (a)-(c) of
// nemesisTest. Only its goroutine touches its maps.
type checker struct {
	n        *nemesis
	prevDown map[string]string
	prevGate map[string]string
	// held is who held a slot at the last sample, per node: a node seen
	// holding anew is a grant.
	held    map[string]bool
	windows map[string]*window
	up      *upTracker
	count   int
	once    sync.Once
	quit    chan struct{}
	done    chan struct{}
}

// window is a CANCEL in force: desired names a cancelled SHA.
type window struct {
	sha      string
	opened   time.Time
	ids      map[string]map[string]bool // node -> container IDs allowed
	inFlight map[string]bool
}

func (n *nemesis) check() *checker {
	ck := &checker{n: n, prevDown: map[string]string{}, prevGate: map[string]string{}, held: map[string]bool{}, windows: map[string]*window{},
		up: newUpTracker(nil), quit: make(chan struct{}), done: make(chan struct{})}
	for _, g := range []string{mgrs, wkrs} {
		if ws, err := fleettest.ListWorkloads(n.c.docker, g); err == nil {
			for id := range newUpTracker(ws).healthy {
				ck.up.healthy[id] = true
			}
		}
	}
	go ck.loop()
	return ck
}

func (ck *checker) loop() {
	defer close(ck.done)
	for {
		for _, g := range []string{mgrs, wkrs} {
			ck.sample(g)
		}
		ck.count++
		select {
		case <-ck.quit:
			return
		case <-time.After(sampleEvery):
		}
	}
}

func (ck *checker) stop() {
	ck.once.Do(func() { close(ck.quit) })
	<-ck.done
}

func (ck *checker) samples() int { return ck.count }

func (ck *checker) sample(g string) {
	ws, err := fleettest.ListWorkloads(ck.n.c.docker, g)
	if err != nil {
		ck.n.note("sample %s: %v", g, err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), consulBudget)
	defer cancel()
	gs, err := ck.n.c.store().Read(ctx, g, nil)
	if err != nil {
		gs = nil // Consul out of reach (a leader election): (a) from Docker alone
	}
	ck.checkDown(g, ws, gs)
	if gs == nil {
		return
	}
	ck.noteGate(g, gs)
	ck.checkCancel(g, ws, gs)
	ck.checkFailures(g, gs)
}

// checkDown is invariant (a).
func (ck *checker) checkDown(g string, ws map[string]workload, gs *coordinator.GroupState) {
	holding := map[string]bool{}
	if gs != nil {
		for _, e := range gs.Holders.Holding {
			holding[e.Name] = true
		}
	}
	down, _ := ck.up.down(ws, ck.n.nodesOf(g))
	var idle, grand []string
	f := ck.n.f
	f.mu.Lock()
	for _, nd := range ck.n.nodesOf(g) {
		// A grant within detectWindow of an idle node's death came before
		// Consul could know of it (README: the failure detectors' bound).
		if holding[nd] && !ck.held[nd] && time.Since(f.idleKilled[g]) < detectWindow {
			f.grand[nd] = true
		}
		ck.held[nd] = holding[nd]
	}
	for _, nd := range ck.n.nodesOf(g) {
		up := !slices.Contains(down, nd)
		if f.idle[nd] == "revived" && (up || holding[nd]) {
			delete(f.idle, nd)
		}
		if f.grand[nd] && up && !holding[nd] {
			delete(f.grand, nd)
		}
		if up {
			continue
		}
		switch {
		case f.idle[nd] != "":
			idle = append(idle, nd)
		case f.grand[nd]:
			grand = append(grand, nd)
		}
	}
	f.mu.Unlock()
	line := fmt.Sprintf("down %v (nemesis-idle %v, forgiven %v) holding %v", down, idle, grand, slices.Sorted(maps.Keys(holding)))
	if ck.prevDown[g] != line {
		ck.prevDown[g] = line
		// With each node's containers as Docker lists them, so that a
		// violation can be told from the timeline alone.
		var seen []string
		for _, nd := range ck.n.nodesOf(g) {
			seen = append(seen, fmt.Sprintf("%s %q", nd, ws[nd].Status))
		}
		ck.n.note("%s %s; %s", g, line, strings.Join(seen, "; "))
	}
	if bound := max(nemesisK, len(idle)) + len(grand); len(down) > bound {
		ck.n.violate("a "+g, "(a) %s: %d unhealthy %v > max(K=%d, nemesis-idle %v) + forgiven %v; holding %v",
			g, len(down), down, nemesisK, idle, grand, slices.Sorted(maps.Keys(holding)))
	}
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

// checkCancel is invariant (b).
func (ck *checker) checkCancel(g string, ws map[string]workload, gs *coordinator.GroupState) {
	if gs.Desired == nil {
		return
	}
	w := ck.windows[g]
	if w != nil && w.sha != gs.Desired.SHA {
		ck.n.note("%s: cancel window of %s closed, desired is %s", g, coordinator.ShortSHA(w.sha), coordinator.ShortSHA(gs.Desired.SHA))
		w = nil
	}
	if w == nil && gs.Cancel != nil {
		w = openWindow(gs, ws)
		ck.n.note("%s: cancel of %s in force (index %d); in a step: %v", g, coordinator.ShortSHA(w.sha), gs.Index, slices.Sorted(maps.Keys(w.inFlight)))
	}
	ck.windows[g] = w
	if w == nil {
		return
	}
	for _, nd := range ck.n.nodesOf(g) {
		wl := ws[nd]
		if w.ids[nd] == nil {
			w.ids[nd] = map[string]bool{}
		}
		for _, id := range wl.IDs {
			switch {
			case w.ids[nd][id]:
			case w.inFlight[nd] && time.Since(w.opened) < cancelGrace:
				w.ids[nd][id] = true
			default:
				ck.n.violate("b "+g+" "+nd+" "+id[:12], "(b) %s: container %.12s created on %s %s after the cancel of %s was in force",
					g, id, nd, time.Since(w.opened).Round(100*time.Millisecond), coordinator.ShortSHA(w.sha))
			}
		}
		if w.inFlight[nd] {
			continue
		}
		for id := range w.ids[nd] {
			if !slices.Contains(wl.IDs, id) {
				ck.n.violate("b "+g+" "+nd+" "+id[:12], "(b) %s: container %.12s of %s, in no step, removed %s after the cancel of %s was in force",
					g, id, nd, time.Since(w.opened).Round(100*time.Millisecond), coordinator.ShortSHA(w.sha))
			}
		}
	}
}

// openWindow notes each node's containers, and which nodes are in a step:
// holding the slot, not healthy, two containers, or recorded replacing or
// verifying.
func openWindow(gs *coordinator.GroupState, ws map[string]workload) *window {
	w := &window{sha: gs.Desired.SHA, opened: time.Now(), ids: map[string]map[string]bool{}, inFlight: map[string]bool{}}
	for nd, wl := range ws {
		w.ids[nd] = map[string]bool{}
		for _, id := range wl.IDs {
			w.ids[nd][id] = true
		}
		if !wl.Healthy || len(wl.IDs) > 1 {
			w.inFlight[nd] = true
		}
	}
	for _, e := range gs.Holders.Holding {
		w.inFlight[e.Name] = true
	}
	for _, ns := range gs.Nodes {
		if ns.State == coordinator.StateReplacing || ns.State == coordinator.StateVerifying {
			w.inFlight[ns.Node] = true
		}
	}
	for nd := range w.inFlight {
		if w.ids[nd] == nil {
			w.ids[nd] = map[string]bool{}
		}
	}
	return w
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
		if !pauses || p.Failures != u.MaxFailures || count != p.Failures {
			ck.n.violate("c pause "+g+" "+sha, "(c) %s: pause of %s counts %d failure(s), %d recorded %v, failure_action=%s max_failures=%d",
				g, sha, p.Failures, count, who, u.FailureAction, u.MaxFailures)
		}
		return
	}
	if count < u.MaxFailures || latest.Before(gs.Desired.CommittedAt) {
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
