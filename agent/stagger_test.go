package agent_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/testkit"
	"github.com/rollagent/rollagent/lockstep"
)

// slotEvent is a grant or a release of the group's slot, as a blocking
// watch of the holders record saw it, at the test's monotonic time.
type slotEvent struct {
	at      time.Time
	release bool   // the record's release count moved
	node    string // a grant: the node that joined the holders
	holders int
}

// holdersWatch records every grant and release of group's slot until ctx
// ends, and the gate's state as a store of the test's own judged it at
// each change.
type holdersWatch struct {
	mu     sync.Mutex
	events []slotEvent
	states map[coordinator.GateState]bool
}

func watchHolders(ctx context.Context, t *testing.T, c *api.Client, group string) *holdersWatch {
	w := &holdersWatch{states: map[coordinator.GateState]bool{}}
	st := coordinator.NewStore(c, "")
	first, released, held := true, uint64(0), map[string]bool{}
	followHolders(ctx, t, c, group, func(now time.Time, rec *lockstep.Holders) {
		names := map[string]bool{}
		for _, e := range rec.Holding {
			names[e.Name] = true
		}
		w.mu.Lock()
		if !first && rec.Released != released {
			w.events = append(w.events, slotEvent{at: now, release: true, holders: len(names)})
		}
		for n := range names {
			if !held[n] && !first {
				w.events = append(w.events, slotEvent{at: now, node: n, holders: len(names)})
			}
		}
		w.mu.Unlock()
		first, released, held = false, rec.Released, names
		if gs, err := st.Read(ctx, group, nil); err == nil {
			v := gs.Gate()
			w.mu.Lock()
			w.states[v.State] = true
			w.mu.Unlock()
		}
	})
	return w
}

func (w *holdersWatch) seen() ([]slotEvent, map[coordinator.GateState]bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	states := map[coordinator.GateState]bool{}
	for s := range w.states {
		states[s] = true
	}
	return append([]slotEvent(nil), w.events...), states
}

// Every grant of a rollout with update.stagger comes at least the stagger
// after the release before it, as a watch of Consul's holders record saw
// both (no grace subtracted), with K = 1 and K = 2 and through a restart
// of every agent during a stagger; a stagger of 0 changes nothing: no
// verdict says stagger, and the rollout converges as before.
func TestStaggerSpacesGrantsAfterReleases(t *testing.T) {
	for _, tc := range []struct {
		name    string
		nodes   []string
		k       int
		stagger time.Duration
		restart bool
	}{
		{"K=1", []string{"n1", "n2", "n3"}, 1, 1500 * time.Millisecond, true},
		{"K=2", []string{"n1", "n2", "n3", "n4"}, 2, 1500 * time.Millisecond, false},
		{"no stagger", []string{"n1", "n2", "n3"}, 1, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newStaggerFleet(t, tc.nodes, 300*time.Millisecond)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			w := watchHolders(ctx, t, f.consul, f.group)
			s := recordingSpec(t, f.group, "v2", "")
			s.Update.MaxParallel, s.Update.Stagger = hashspec.Count(tc.k), hashspec.Duration(tc.stagger)
			r, err := f.st.Commit(ctx, f.group, s, "test", "commit v2")
			if err != nil {
				t.Fatal(err)
			}
			if tc.restart {
				waitEvent(t, w, "the first release of v2", func(e slotEvent) bool { return e.release })
				for _, n := range tc.nodes {
					f.agents[n].stop(t)
					f.startOwn(n)
				}
			}
			f.waitConverged(tc.nodes, r.SHA)
			events, states := w.seen()
			checkStagger(t, events, tc.stagger, tc.k, len(tc.nodes))
			if tc.stagger > 0 != states[coordinator.GateStagger] {
				t.Errorf("the gate's states seen %v: want stagger among them: %v", states, tc.stagger > 0)
			}
		})
	}
}

// checkStagger fails the test for a grant that came sooner than stagger
// after the release before it, or for more than k holders at once, and
// wants a grant for each node.
func checkStagger(t *testing.T, events []slotEvent, stagger time.Duration, k, nodes int) {
	t.Helper()
	var release time.Time
	grants := 0
	for _, e := range events {
		if e.holders > k {
			t.Errorf("%d holders at once, K = %d", e.holders, k)
		}
		if e.release {
			release = e.at
			continue
		}
		grants++
		if gap := e.at.Sub(release); !release.IsZero() && gap < stagger {
			t.Errorf("%s granted %v after the release before it, want at least the stagger %v", e.node, gap, stagger)
		}
	}
	if grants < nodes {
		t.Errorf("%d grants seen, want one for each of %d nodes: %s", grants, nodes, fmt.Sprint(events))
	}
}

func waitEvent(t *testing.T, w *holdersWatch, what string, cond func(slotEvent) bool) {
	t.Helper()
	testkit.Eventually(t, time.Minute, what, func() bool {
		events, _ := w.seen()
		return slices.ContainsFunc(events, cond)
	})
}
