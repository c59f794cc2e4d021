package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/coordinator"
)

// boundedExec is the exec runtime with a short bound for each destructive
// call: StepTimeout is how a runtime tells the agent that bound, and the
// exec runtime's own, ten minutes, would make a test of it take as long.
type boundedExec struct {
	*agent.Exec
	step time.Duration
}

func (b boundedExec) StepTimeout() time.Duration { return b.step }

// The durations of TestExecStepPartsHaveTheirOwnBounds, chosen so that any
// two parts of the step sharing a bound would cut one of them off.
const (
	boundDeadline = 3 * time.Second // the spec's healthy_deadline
	boundHook     = 5 * time.Second // every replace hook run: past healthy_deadline
	boundStep     = 8 * time.Second // one destructive call: one hook run, not two
)

// Replace, verify, undo and record each have a bound of their own: a
// replace hook that runs past the spec's healthy_deadline completes, the
// health check that fails then still gets its whole healthy_deadline, the
// undo gets a step's bound of its own (two hook runs would not fit in one),
// and the failure is recorded, once, and failure_action taken. On d2778cf
// (issue 20) the whole step shared healthy_deadline + 2m: a hook that ran
// past it was killed, the undo failed at once with context deadline
// exceeded, and the failure was never recorded, which left the gate open.
func TestExecStepPartsHaveTheirOwnBounds(t *testing.T) {
	ef := newInProcExecFleet(t, "bounds")
	rt := boundedExec{Exec: ef.runtime("n1", fmt.Sprintf("sleep %g", boundHook.Seconds())), step: boundStep}
	a := startAgent(t, ef.store, ef.group, "n1", rt, agent.Allow{})
	deadline := boundDeadline.String()
	v1 := ef.commit(ef.spec("v1", 1, deadline, nil))
	ef.waitFor(time.Minute, "v1 installed on n1", func() bool { return ef.converged([]string{"n1"}, v1) })
	bad := ef.commit(ef.spec("bad", 1, deadline, map[string]string{"BADRELEASE": "1"}))
	ef.waitFor(2*time.Minute, "n1 failed on the bad release and its slot free", func() bool {
		gs := ef.state()
		for _, n := range gs.Nodes {
			if n.Node == "n1" && n.Desired == bad && (n.State == coordinator.StateFailed || n.State == coordinator.StatePaused) {
				return gs.Holders != nil && len(gs.Holders.Holding) == 0
			}
		}
		return false
	})
	a.stop(t) // nothing may be counted twice, not even at the agent's stop
	ef.checkOneFailurePaused("n1", bad)
	ef.checkUndone("n1", v1, bad)
}

// checkOneFailurePaused checks in Consul that node's failure to reach sha
// was recorded once, and counted once, and that it paused the group.
func (ef *execFleet) checkOneFailurePaused(node, sha string) {
	t := ef.t
	t.Helper()
	gs := ef.state()
	if len(gs.Failures) != 1 || gs.Failures[0].Node != node || gs.Failures[0].SHA != sha {
		t.Fatalf("failures %+v, want exactly one, of %s for %.12s", gs.Failures, node, sha)
	}
	if gs.Pause == nil || gs.Pause.SHA != sha || gs.Gate().Open {
		t.Fatalf("pause %+v, gate %+v: want failure_action=pause taken for %.12s and the gate closed", gs.Pause, gs.Gate(), sha)
	}
	k := ef.keys()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, _, err := ef.srv.Client().KV().Get(k.FailCount(sha), (&api.QueryOptions{}).WithContext(ctx))
	if err != nil || p == nil {
		t.Fatalf("failure counter of %.12s: %v, %v", sha, p, err)
	}
	var c coordinator.FailCount
	if err := json.Unmarshal(p.Value, &c); err != nil || c.Failures != 1 {
		t.Fatalf("failure counter of %.12s is %s (%v), want 1 failure", sha, p.Value, err)
	}
}

// checkUndone checks from node's hook log and state file that the hook ran
// for prev, for bad (to its end, past healthy_deadline), and then for prev
// again, to its end: the undo, which left prev installed.
func (ef *execFleet) checkUndone(node, prev, bad string) {
	t := ef.t
	t.Helper()
	runs := ef.endedRuns(node)
	shas := runSHAs(runs)
	if want := []string{prev, bad, prev}; !slices.Equal(shas, want) {
		t.Fatalf("%s: hook runs for %.12q, want %.12q: install, the bad release, its undo", node, shas, want)
	}
	if took := runs[1].end.Sub(runs[1].begin); took < boundDeadline {
		t.Fatalf("%s: the bad release's hook took %s, not past healthy_deadline %s: the test proves nothing", node, took, boundDeadline)
	}
	if !ef.installed(node, prev) {
		sha, pending := ef.execState(node)
		t.Fatalf("%s: state file sha=%.12s pending=%.12s, want %.12s installed after the undo", node, sha, pending, prev)
	}
}
