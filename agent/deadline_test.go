package agent_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/testkit"
)

// testDeadline is the progress deadline of these tests: past a
// healthy_deadline of 2 s, and short enough to wait for several times.
const testDeadline = 6 * time.Second

// commitDeadline commits a release whose progress deadline is
// testDeadline under failure_action=continue, shaped by more.
func (f *windowFleet) commitDeadline(release string, more func(*hashspec.Update)) string {
	f.t.Helper()
	s := recordingSpec(f.t, f.group, release, "")
	u := &s.Update
	u.FailureAction, u.HealthyDeadline, u.ProgressDeadline = hashspec.FailureContinue, hashspec.Duration(2*time.Second), hashspec.Duration(testDeadline)
	if more != nil {
		more(u)
	}
	return commitSpec(f.t, f.st, f.group, release, s)
}

// sicken makes every node's workload of the next release never healthy.
func (f *windowFleet) sicken() {
	for _, rt := range f.rts {
		rt.mu.Lock()
		rt.recordingRuntime.sick = "never healthy"
		rt.mu.Unlock()
	}
}

// deadlines are what Consul holds of sha's progress deadline: the events
// in every writer's part of the log, and the record (nil when none).
func (f *windowFleet) deadlines(sha string) (events []coordinator.Event, rec *coordinator.Deadline) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	log, err := f.st.Events(ctx, f.group)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, e := range log.Events {
		if e.Kind == coordinator.EventDeadline && e.SHA == sha {
			events = append(events, e.Event)
		}
	}
	return events, f.state().Deadline
}

// firedOnce waits for sha's deadline to pass, and checks Consul holds it
// once: one record, one event, by one of nodes, not before from+testDeadline
// (what the count could not have passed before, on this host's clock).
func (f *windowFleet) firedOnce(nodes []string, sha string, from time.Time) *coordinator.Deadline {
	f.t.Helper()
	var rec *coordinator.Deadline
	testkit.Eventually(f.t, time.Minute, "the progress deadline to pass", func() bool {
		_, rec = f.deadlines(sha)
		return rec != nil
	})
	if evs, _ := f.deadlines(sha); len(evs) != 1 {
		f.t.Fatalf("%d deadline events, want 1: %+v", len(evs), evs)
	}
	if !strings.Contains(strings.Join(nodes, ","), rec.Node) || rec.Reason != coordinator.DeadlineReason(testDeadline) {
		f.t.Errorf("record %+v: want one of %v's, with the deadline's reason", rec, nodes)
	}
	if rec.At.Before(from.Add(testDeadline)) {
		f.t.Errorf("fired at %s, before %s + the deadline", rec.At.Format(time.StampMilli), from.Format(time.StampMilli))
	}
	return rec
}

// noneFor checks that sha's deadline does not pass for d.
func (f *windowFleet) noneFor(sha string, d time.Duration, while string) {
	f.t.Helper()
	testkit.Steady(f.t, d, 500*time.Millisecond, func() error {
		if evs, rec := f.deadlines(sha); len(evs) > 0 || rec != nil {
			return fmt.Errorf("the deadline passed %s: %+v", while, rec)
		}
		return nil
	})
}

// An image that never gets healthy under failure_action=continue: every
// node fails and nothing converges. The deadline passes exactly once for
// the whole fleet, counted from the last restart of every agent (a restart
// starts each count over), and never again, across another restart.
func TestProgressDeadlineFiresOnce(t *testing.T) {
	nodes := []string{"n1", "n2", "n3"}
	f := newWindowFleet(t, nodes, 0)
	f.sicken()
	v2 := f.commitDeadline("v2", nil)
	time.Sleep(testDeadline / 2)
	restarted := time.Now()
	f.restartAll(nodes)
	rec := f.firedOnce(nodes, v2, restarted)
	if rec.Action != hashspec.FailureContinue {
		t.Errorf("record %+v: want failure_action continue", rec)
	}
	if v := f.state().Gate(); !v.Open {
		t.Errorf("gate %+v: under continue the rollout goes on", v)
	}
	f.restartAll(nodes)
	testkit.Steady(t, 2*testDeadline, 500*time.Millisecond, func() error {
		if evs, _ := f.deadlines(v2); len(evs) != 1 {
			return fmt.Errorf("%d deadline events after a restart of every agent, want 1", len(evs))
		}
		return nil
	})
}

// While an operator's pause closes the gate, for more than the deadline,
// through a restart of every agent, the deadline does not pass; once
// resumed, it passes after the gate has been open for the deadline.
func TestProgressDeadlineNotWhilePaused(t *testing.T) {
	nodes := []string{"n1", "n2"}
	f := newWindowFleet(t, nodes, 0)
	f.sicken()
	committed := time.Now()
	v2 := f.commitDeadline("v2", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, _, err := f.st.PauseBy(ctx, f.group, "hold it", "op"); err != nil {
		t.Fatal(err)
	}
	openBefore := time.Since(committed) // open time the count may have had
	f.noneFor(v2, testDeadline, "while paused")
	f.restartAll(nodes)
	f.noneFor(v2, 2*testDeadline, "while paused, after a restart")
	resumed := time.Now()
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := f.st.ResumeBy(ctx, f.group, "op"); err != nil {
		t.Fatal(err)
	}
	f.firedOnce(nodes, v2, resumed.Add(-openBefore))
}

// Outside the maintenance window for longer than the deadline the deadline
// does not pass; once the window has been open for it, it does.
func TestProgressDeadlineNotOutsideTheWindow(t *testing.T) {
	nodes := []string{"n1", "n2"}
	f := newWindowFleet(t, nodes, 0)
	f.sicken()
	opens := time.Now().UTC().Truncate(time.Minute).Add(time.Minute)
	if time.Until(opens) < 3*testDeadline {
		opens = opens.Add(time.Minute)
	}
	v2 := f.commitDeadline("v2", func(u *hashspec.Update) {
		u.Windows = []hashspec.Window{{Start: opens.Format("15:04"), Length: hashspec.Duration(time.Hour)}}
	})
	f.noneFor(v2, time.Until(opens)-time.Second, "outside the window")
	f.firedOnce(nodes, v2, opens)
}

// While a check the spec blocks on is critical, for longer than the
// deadline, the deadline does not pass; once it has passed for the
// deadline, it does.
func TestProgressDeadlineNotWhileBlocked(t *testing.T) {
	nodes := []string{"n1", "n2"}
	f := newWindowFleet(t, nodes, 0)
	f.sicken()
	registerTTLCheck(t, f.consul, "replication-lag", api.HealthCritical)
	v2 := f.commitDeadline("v2", func(u *hashspec.Update) { u.BlockOn = []hashspec.Block{{Check: "replication-lag"}} })
	f.noneFor(v2, 2*testDeadline, "while blocked by a check")
	passed := setTTL(t, f.consul, "replication-lag", api.HealthPassing)
	f.firedOnce(nodes, v2, passed)
}

// Under failure_action=pause the deadline closes the gate (deadline_passed)
// and every node says so, in its record and its Consul service (what the
// Consul UI shows); resume lifts it as it lifts a failure pause, and
// the deadline does not pass again for the commit.
func TestProgressDeadlinePausesUntilResume(t *testing.T) {
	nodes := []string{"n1", "n2"}
	f := newWindowFleet(t, nodes, 0)
	f.sicken()
	committed := time.Now()
	v2 := f.commitDeadline("v2", func(u *hashspec.Update) { u.FailureAction, u.MaxFailures = hashspec.FailurePause, hashspec.Count(10) })
	rec := f.firedOnce(nodes, v2, committed)
	if rec.Action != hashspec.FailurePause {
		t.Fatalf("record %+v, want failure_action pause", rec)
	}
	if v := f.state().Gate(); v.State != coordinator.GateDeadlinePassed {
		t.Fatalf("gate %+v, want %s", v, coordinator.GateDeadlinePassed)
	}
	for _, n := range nodes {
		waitNode(t, f.st, f.group, n, "paused by the deadline", func(s *coordinator.NodeState) bool {
			return s.State == coordinator.StatePaused && strings.HasPrefix(s.Error, "deadline passed: "+coordinator.DeadlineReason(testDeadline))
		})
	}
	f.waitUIGate(nodes, coordinator.GateDeadlinePassed, "deadline passed: "+coordinator.DeadlineReason(testDeadline))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := f.st.ResumeBy(ctx, f.group, "op"); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, time.Minute, "no service to show the gate deadline_passed after resume", func() bool {
		es, _, err := f.consul.Health().Service(coordinator.ServiceName(f.group), "gate:"+string(coordinator.GateDeadlinePassed), false, nil)
		return err == nil && len(es) == 0
	})
	testkit.Steady(t, 2*testDeadline, 500*time.Millisecond, func() error {
		if evs, _ := f.deadlines(v2); len(evs) != 1 {
			return fmt.Errorf("%d deadline events after resume, want 1", len(evs))
		}
		if v := f.state().Gate(); v.State == coordinator.GateDeadlinePassed {
			return fmt.Errorf("gate %s after resume", v.State)
		}
		return nil
	})
}

// A rollout that makes progress never passes its deadline, even one that
// takes longer in all than the deadline: each node that turns converged
// starts every count over.
func TestProgressDeadlineNotWhileNodesConverge(t *testing.T) {
	nodes := []string{"n1", "n2", "n3", "n4"}
	f := newWindowFleet(t, nodes, 7*time.Second)
	const deadline = 20 * time.Second
	began := time.Now()
	v2 := f.commitDeadline("v2", func(u *hashspec.Update) { u.ProgressDeadline = hashspec.Duration(deadline) })
	f.waitConverged(nodes, v2)
	if took := time.Since(began); took <= deadline {
		// Four 7 s steps one at a time cannot be this quick: the test
		// would show nothing, which must not pass for a pass.
		t.Fatalf("the rollout took %s, no longer than the deadline %s: the test shows nothing", took, deadline)
	}
	if evs, rec := f.deadlines(v2); len(evs) > 0 || rec != nil {
		t.Fatalf("the deadline passed in a rollout that made progress: %+v", rec)
	}
}
