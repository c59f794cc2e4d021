package integration

import (
	"maps"
	"slices"
	"time"

	"github.com/rollagent/rollagent/coordinator"
)

// fenceGap is the longest a step whose fence passed may take to reach
// Docker's Created stamp: a CANCEL applied after the fence cannot stop it,
// and nothing else may move. README's "Guarantees and limits" gives the
// fence-to-step gap as measured (BenchmarkAgentFenceGap: p99 under 0.1 ms);
// the rest of this bound is the daemon's own time from the create call to
// its Created stamp on a loaded CI machine, which rollagent does not
// control. A grant, or a fence that ran after the CANCEL, fails: any
// container created later than this is a step that passed no fence.
const fenceGap = 250 * time.Millisecond

// window is a CANCEL in force: desired names a cancelled SHA.
type window struct {
	sha string
	// from is when the cancel was in force: the nemesis' cancel call had
	// returned (or, for a call that failed but was applied, the first
	// sample that saw it), and desired named the SHA.
	from     time.Time
	measured bool                       // from is the call's return
	ids      map[string]map[string]bool // node -> containers at the first sample
	inFlight map[string]bool
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
		w = ck.openWindow(gs, ws)
		ck.n.note("%s: cancel of %s in force from +%.3fs (the call's return: %v; index %d); in a step: %v", g,
			coordinator.ShortSHA(w.sha), w.from.Sub(ck.n.start).Seconds(), w.measured, gs.Index, slices.Sorted(maps.Keys(w.inFlight)))
	}
	ck.windows[g] = w
	if w == nil {
		return
	}
	for _, nd := range ck.n.nodesOf(g) {
		wl := ws[nd]
		for _, id := range wl.IDs {
			ck.checkCreated(g, nd, id, w)
		}
		if w.inFlight[nd] {
			continue
		}
		for id := range w.ids[nd] {
			if !slices.Contains(wl.IDs, id) {
				ck.n.violate("b "+g+" "+nd+" "+id[:12], "(b) %s: container %.12s of %s, in no step, removed %s after the cancel of %s was in force",
					g, id, nd, time.Since(w.from).Round(100*time.Millisecond), coordinator.ShortSHA(w.sha))
			}
		}
	}
}

// checkCreated judges one container by Docker's Created time.
func (ck *checker) checkCreated(g, nd, id string, w *window) {
	at, ok := ck.created[id]
	if !ok {
		var err error
		if at, err = ck.n.c.created(id); err != nil {
			return // removed meanwhile: it did not run under the cancel for long; the next one is judged
		}
		ck.created[id] = at
	}
	if late := at.Sub(w.from); late > fenceGap {
		ck.n.violate("b "+g+" "+nd+" "+id[:12], "(b) %s: container %.12s created on %s at +%.3fs, %s after the cancel of %s was in force (fence-to-step gap %s)",
			g, id, nd, at.Sub(ck.n.start).Seconds(), late.Round(time.Millisecond), coordinator.ShortSHA(w.sha), fenceGap)
	}
}

// openWindow notes each node's containers, and which nodes are in a step:
// holding the slot, not healthy, two containers, or recorded replacing or
// verifying.
func (ck *checker) openWindow(gs *coordinator.GroupState, ws map[string]workload) *window {
	ck.n.mu.Lock()
	returned, measured := ck.n.cancelled[gs.Desired.SHA]
	ck.n.mu.Unlock()
	from := time.Now()
	if measured {
		from = returned
	}
	// A rollback to a SHA cancelled long ago: the cancel is in force from
	// when desired named it again.
	if gs.Desired.CommittedAt.After(from) {
		from = gs.Desired.CommittedAt
	}
	w := &window{sha: gs.Desired.SHA, from: from, measured: measured, ids: map[string]map[string]bool{}, inFlight: map[string]bool{}}
	for nd, wl := range ws {
		w.ids[nd] = map[string]bool{}
		for _, id := range wl.IDs {
			w.ids[nd][id] = true
		}
		if !wl.Healthy || len(wl.IDs) > 1 {
			w.inFlight[nd] = true
		}
	}
	if gs.Holders != nil {
		for _, e := range gs.Holders.Holding {
			w.inFlight[e.Name] = true
		}
	}
	for _, ns := range gs.Nodes {
		if ns.State == coordinator.StateReplacing || ns.State == coordinator.StateVerifying {
			w.inFlight[ns.Node] = true
		}
	}
	return w
}
