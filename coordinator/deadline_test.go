package coordinator

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/consultest"
)

// withDeadline is a release whose progress deadline is after.
func withDeadline(t *testing.T, tag, action string, after time.Duration) *hashspec.Spec {
	t.Helper()
	s := release(t, tag, action, 1)
	s.Update.HealthyDeadline = hashspec.Duration(after / 2)
	s.Update.MinHealthyTime = hashspec.Duration(after / 4)
	s.Update.ProgressDeadline = hashspec.Duration(after)
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestDeadlineRule(t *testing.T) {
	spec := specWith(t, "pause", 1, 1)
	byDeadline := func(t *testing.T) *GroupState {
		g := fixture{spec: spec, pause: true}.state(t)
		g.Pause.Cause, g.Pause.Reason = CauseProgressDeadline, DeadlineReason(10*time.Minute)
		return g
	}
	runRule(t, deadlineRule{}, []ruleCase{
		{"the deadline's pause", byDeadline, true, "deadline passed: no node converged in 10m0s (update.progress_deadline)", StatePaused},
		{"a failure pause", group(fixture{spec: spec, pause: true}), false, "", ""},
		{"no pause", group(fixture{spec: spec}), false, "", ""},
	})
	if v := Evaluate(GateInput{Group: byDeadline(t), Now: time.Now()}); v.State != GateDeadlinePassed || v.Open {
		t.Fatalf("verdict %+v, want %s: the deadline's rule comes before the failure pause's", v, GateDeadlinePassed)
	}
}

// fireAtOnce has n agents fire the deadline of group's desired commit at
// once, and returns how many fired.
func fireAtOnce(t *testing.T, st *Store, group string, n int) int {
	t.Helper()
	g := read(t, st, group)
	var mu sync.Mutex
	fired := 0
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ok, _, err := st.FireDeadline(testCtx(t), group, fmt.Sprintf("n%d", i), g.Desired.SHA, g.Desired.CommittedAt)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if ok {
				fired++
			}
		})
	}
	wg.Wait()
	return fired
}

// deadlineEvents counts the deadline events of sha in group's log.
func deadlineEvents(t *testing.T, st *Store, group, sha string) int {
	t.Helper()
	log, err := st.Events(testCtx(t), group)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range log.Events {
		if e.Kind == EventDeadline && e.SHA == sha {
			n++
		}
	}
	return n
}

// Of agents that fire at once, exactly one does, and failure_action applies
// once: under each action, the record, the event and what it did.
func TestFireDeadlineExactlyOnce(t *testing.T) {
	st := NewStore(consultest.NewDev(t).Client(), "")
	for _, action := range []string{"continue", "pause", "rollback"} {
		t.Run(action, func(t *testing.T) {
			for trial := range 5 {
				group := fmt.Sprintf("deadline-%s-%d", action, trial)
				good := commit(t, st, group, release(t, "v1", "pause", 1))
				converge(t, st, group, "n9")
				bad := commit(t, st, group, withDeadline(t, "bad", action, time.Hour))
				if n := fireAtOnce(t, st, group, 4); n != 1 {
					t.Fatalf("trial %d: %d of 4 fired, want 1", trial, n)
				}
				if n := deadlineEvents(t, st, group, bad); n != 1 {
					t.Fatalf("trial %d: %d deadline events, want 1", trial, n)
				}
				g := read(t, st, group)
				switch action {
				case "continue":
					if v := g.Gate(); !v.Open || g.Deadline == nil || g.Deadline.Action != "continue" {
						t.Fatalf("trial %d: gate %+v, record %+v: want it open, with the record", trial, v, g.Deadline)
					}
					if n := fireAtOnce(t, st, group, 2); n != 0 {
						t.Fatalf("trial %d: fired again (%d)", trial, n)
					}
				case "pause":
					if v := g.Gate(); v.State != GateDeadlinePassed || v.Reason != "deadline passed: "+DeadlineReason(time.Hour) {
						t.Fatalf("trial %d: gate %+v, want %s", trial, v, GateDeadlinePassed)
					}
					if _, err := st.Resume(testCtx(t), group); err != nil {
						t.Fatal(err)
					}
					if log, err := st.Events(testCtx(t), group); err != nil || !strings.HasPrefix(log.Events[len(log.Events)-1].Reason, "lifted the pause as the progress deadline passed: ") {
						t.Fatalf("trial %d: the resume's event does not say it lifted the deadline's pause (%v)", trial, err)
					}
					if v := read(t, st, group).Gate(); !v.Open {
						t.Fatalf("trial %d: after resume, gate %+v", trial, v)
					}
					if n := fireAtOnce(t, st, group, 2); n != 0 {
						t.Fatalf("trial %d: fired again after resume (%d)", trial, n)
					}
				case "rollback":
					if g.Desired.SHA != good || g.Desired.Previous != bad {
						t.Fatalf("trial %d: desired %+v, want a rollback to %s", trial, g.Desired, ShortSHA(good))
					}
				}
			}
		})
	}
}

// It does not fire while the gate is closed (an operator's pause, a
// CANCEL, a failure pause, a window that is not open), nor for a commit
// that is no longer desired; and a commit of the same SHA again measures
// its own deadline.
func TestFireDeadlineOnlyThroughAnOpenGate(t *testing.T) {
	st := NewStore(consultest.NewDev(t).Client(), "")
	closed := map[string]func(t *testing.T, group string){
		"operator pause": func(t *testing.T, group string) {
			if _, _, err := st.PauseBy(testCtx(t), group, "hold", "op"); err != nil {
				t.Fatal(err)
			}
		},
		"cancel": func(t *testing.T, group string) {
			if _, err := st.Cancel(testCtx(t), group, read(t, st, group).Desired.SHA, "stop", "op"); err != nil {
				t.Fatal(err)
			}
		},
		"failure pause": func(t *testing.T, group string) {
			if _, err := st.RecordFailure(testCtx(t), group, "n1", read(t, st, group).Desired.SHA, "boom"); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, close := range closed {
		t.Run(name, func(t *testing.T) {
			group := "closed-" + name[:4]
			commit(t, st, group, withDeadline(t, "v2", "pause", time.Hour))
			close(t, group)
			if n := fireAtOnce(t, st, group, 2); n != 0 {
				t.Fatalf("fired %d times through a closed gate", n)
			}
		})
	}
	t.Run("outside a window", func(t *testing.T) {
		s := withDeadline(t, "v2", "pause", time.Hour)
		now := time.Now().UTC()
		s.Update.Windows = []hashspec.Window{{Start: now.Add(2 * time.Hour).Format("15:04"), Length: hashspec.Duration(time.Hour)}}
		commit(t, st, "closed-window", s)
		if n := fireAtOnce(t, st, "closed-window", 2); n != 0 {
			t.Fatalf("fired %d times outside the window", n)
		}
	})
	t.Run("the writer converged", func(t *testing.T) {
		commit(t, st, "conv", withDeadline(t, "v2", "continue", time.Hour))
		converge(t, st, "conv", "n0")
		g := read(t, st, "conv")
		if ok, _, err := st.FireDeadline(testCtx(t), "conv", "n0", g.Desired.SHA, g.Desired.CommittedAt); err != nil || ok {
			t.Fatalf("a converged node's agent fired (%v, %v)", ok, err)
		}
	})
	t.Run("a commit again", func(t *testing.T) {
		group := "again"
		v2 := withDeadline(t, "v2", "continue", time.Hour)
		commit(t, st, group, v2)
		old := read(t, st, group).Desired
		if n := fireAtOnce(t, st, group, 1); n != 1 {
			t.Fatalf("fired %d, want 1", n)
		}
		commit(t, st, group, release(t, "v3", "pause", 1))
		commit(t, st, group, v2)
		ok, _, err := st.FireDeadline(testCtx(t), group, "n1", old.SHA, old.CommittedAt)
		if err != nil || ok {
			t.Fatalf("the earlier commit's deadline fired (%v, %v)", ok, err)
		}
		if g := read(t, st, group); g.Deadline != nil {
			t.Fatalf("the new commit reads the earlier one's record: %+v", g.Deadline)
		}
		if n := fireAtOnce(t, st, group, 3); n != 1 {
			t.Fatalf("the commit again fired %d, want 1", n)
		}
	})
}
