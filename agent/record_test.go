package agent_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/testkit"
	"github.com/rollagent/rollagent/internal/testkit/groupkit"
)

// sickRuntime is a recordingRuntime whose workload of sick is never
// healthy, and which calls before once, right before the first undo of
// it: past the undo's fence, before the failure is recorded.
type sickRuntime struct {
	*recordingRuntime
	sick   string
	before func()
	once   sync.Once
}

func (r *sickRuntime) WaitHealthy(ctx context.Context, spec *hashspec.Spec) error {
	if r.SHA() != r.sick {
		return r.recordingRuntime.WaitHealthy(ctx, spec)
	}
	r.record("WaitHealthy")
	return errors.New("unhealthy")
}

func (r *sickRuntime) Restore(ctx context.Context, sha string) error {
	if sha == r.sick {
		r.once.Do(r.before)
	}
	return r.recordingRuntime.Restore(ctx, sha)
}

// A failure that Consul cannot take when it happens is recorded once
// Consul is back: the agent tries again rather than lose it. Lost, it
// would count nowhere, the gate would stay open, and the node (and every
// other) would replace its workload with the bad release again. Consul
// goes away once the undo has passed its fence (issue 25: no fence, no
// undo), between the undo and the failure's record.
func TestFailureRecordedAfterConsulReturns(t *testing.T) {
	srv := consultest.New(t, consultest.Options{Persistent: true})
	g := groupkit.On(t, srv, "record")
	st, group := g.Store, g.Name
	v1 := commitRecording(t, st, group, "v1", "")
	bad, _ := recordingSpec(t, group, "bad", "").SHA()
	rt := &sickRuntime{recordingRuntime: &recordingRuntime{}, sick: bad, before: srv.Kill}
	a := startAgent(t, st, group, "n1", rt, agent.Allow{})
	waitNode(t, st, group, "n1", "converged on v1", func(n *coordinator.NodeState) bool {
		return n.State == coordinator.StateConverged && n.SHA == v1
	})
	rt.Calls()
	commitRecording(t, st, group, "bad", "") // pauses at its first failure
	testkit.Eventually(t, time.Minute, "the agent to fail to record the failure", func() bool {
		return strings.Contains(a.logs.String(), "cannot record the failure")
	})
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	if err := srv.WaitReady(consultest.StartTimeout); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, time.Minute, "the failure to be recorded and the group paused", func() bool {
		gs, err := st.Read(context.Background(), group, nil)
		return err == nil && len(gs.Failures) == 1 && gs.Failures[0].Node == "n1" && gs.Pause != nil
	})
	a.stop(t)
	if n := rt.count("Replace"); n != 1 {
		t.Fatalf("the agent replaced its workload %d times, want once: a failure it did not record let it try the bad release again", n)
	}
}
