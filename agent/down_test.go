package agent_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/testkit/groupkit"
)

// scriptedRuntime is a recordingRuntime whose workload's health the test
// scripts, and whose Replace can be held mid-step.
type scriptedRuntime struct {
	recordingRuntime
	// sick, when set, says whether the workload fails its probe now; a
	// Replace makes it healthy for good.
	sick func() bool
	// hold, when set, holds Replace until it is closed.
	hold chan struct{}

	smu      sync.Mutex
	replaced []time.Time // when each Replace began
}

func newScripted(sha string) *scriptedRuntime {
	return &scriptedRuntime{recordingRuntime: recordingRuntime{sha: sha}}
}

// StepTimeout outlasts the longest hold of a test.
func (r *scriptedRuntime) StepTimeout() time.Duration { return 2 * time.Minute }

func (r *scriptedRuntime) setSick(sick func() bool) {
	r.smu.Lock()
	defer r.smu.Unlock()
	r.sick = sick
}

func (r *scriptedRuntime) Healthy(context.Context) (bool, string) {
	r.smu.Lock()
	sick := r.sick
	r.smu.Unlock()
	if sick != nil && sick() {
		return false, "probe failed"
	}
	return true, ""
}

func (r *scriptedRuntime) Replace(ctx context.Context, spec *hashspec.Spec, sha string, step agent.StepFunc) error {
	r.smu.Lock()
	r.replaced = append(r.replaced, time.Now())
	hold := r.hold
	r.smu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := r.recordingRuntime.Replace(ctx, spec, sha, step); err != nil {
		return err
	}
	r.setSick(nil)
	return nil
}

// replaces are the times each Replace began.
func (r *scriptedRuntime) replaces() []time.Time {
	r.smu.Lock()
	defer r.smu.Unlock()
	return slices.Clone(r.replaced)
}

// slotOf reads group's slot from Consul: the nodes in line or holding, and
// the nodes whose claim counts against max_parallel now.
func slotOf(t *testing.T, st *coordinator.Store, group string) (inLine, using []string) {
	t.Helper()
	gs := readGroup(t, st, group)
	if gs.Holders == nil {
		return nil, nil
	}
	for _, n := range gs.Holders.Names() {
		inLine = append(inLine, n)
	}
	using = groupkit.HolderNames(gs.Holders)
	for _, n := range gs.Holders.Counted() {
		if !slices.Contains(using, n) {
			using = append(using, n)
		}
	}
	slices.Sort(inLine)
	slices.Sort(using)
	return inLine, using
}

// agentCheck is the status of the Consul check id on c's agent.
func agentCheck(t *testing.T, c *api.Client, id string) string {
	t.Helper()
	cs, err := c.Agent().Checks()
	if err != nil || cs[id] == nil {
		return ""
	}
	return cs[id].Status
}

// hostCritical says whether Consul sees node's serfHealth critical.
func hostCritical(c *api.Client, node string) bool {
	checks, _, err := c.Health().Node(node, nil)
	if err != nil {
		return false
	}
	for _, ch := range checks {
		if ch.CheckID == "serfHealth" {
			return ch.Status == api.HealthCritical
		}
	}
	return false
}

// waitInLine waits until every node of nodes is in line for g's slot (its
// contender key in Consul), or one of rts has begun a Replace.
func waitInLine(t *testing.T, g *groupkit.Group, nodes []string, rts ...*scriptedRuntime) {
	t.Helper()
	g.WaitFor(time.Minute, "every waiter in line, or a replacement", func() bool {
		for _, rt := range rts {
			if len(rt.replaces()) > 0 {
				return true
			}
		}
		inLine, _ := slotOf(t, g.Store, g.Name)
		for _, n := range nodes {
			if !slices.Contains(inLine, n) {
				return false
			}
		}
		return true
	})
}

// notReplaced fails the test if any of rts has begun a Replace.
func notReplaced(t *testing.T, what string, rts map[string]*scriptedRuntime) {
	t.Helper()
	for n, rt := range rts {
		if r := rt.replaces(); len(r) > 0 {
			t.Fatalf("%s: %s was replaced (at %s)", what, n, r[0].Format(time.StampMilli))
		}
	}
}
