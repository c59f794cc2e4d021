package agent_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/testkit"
	"github.com/rollagent/rollagent/internal/testkit/groupkit"
)

// An agent with nothing to contend for holds no session: a session's TTL
// check is passed every second, which an idle fleet must not pay for. A
// waiter that is cancelled, and then nodes that finish a rollout, must not
// keep their sessions until desired moves again or the next resync.
func TestAgentsWithNothingToDoHoldNoSession(t *testing.T) {
	g := groupkit.New(t, "idle-session")
	c := g.Client
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	for _, n := range []string{"n1", "n2"} {
		d := t.TempDir()
		inst := filepath.Join(d, "installed")
		rt := &agent.Exec{StateDir: d, Group: g.Name, Node: n,
			ReplaceCmd: []string{"sh", "-c", `sleep 2 && echo "$ROLLAGENT_SHA" >'` + inst + `'`},
			HealthCmd:  []string{"sh", "-c", `grep -qx "$ROLLAGENT_SHA" '` + inst + `'`}}
		a, err := agent.New(agent.Config{Group: g.Name, Node: n, Store: g.Store, Runtime: rt})
		if err != nil {
			t.Fatal(err)
		}
		go func() { done <- a.Run(ctx) }()
	}
	t.Cleanup(func() { cancel(); <-done; <-done })
	commit := func(release string) string {
		spec, _, err := hashspec.Load([]byte(fmt.Sprintf(`{"name":%q,"container":{"image":"example.com/app:%s"},
			"update":{"max_parallel":1,"min_healthy_time":"1s"}}`, g.Name, release)), hashspec.FormatJSON, "spec")
		if err != nil {
			t.Fatal(err)
		}
		res, err := g.Store.Commit(ctx, g.Name, spec, "test", "commit")
		if err != nil {
			t.Fatal(err)
		}
		return res.SHA
	}
	v1 := commit("1")
	g.WaitFor(time.Minute, "one holder and one waiter", func() bool {
		gs, err := g.Store.Read(ctx, g.Name, nil)
		return err == nil && gs.Holders != nil && len(gs.Holders.Holding) == 1 && len(gs.Holders.Waiting) == 1
	})
	// Each contender's session check is carried by its service: one
	// registration, one catalog write, made as it turned to waiting.
	g.WaitFor(10*time.Second, "each contender's session check on its service", func() bool {
		return len(sessionChecks(t, c, g.Name, true)) == 2
	})
	if _, err := g.Store.Cancel(ctx, g.Name, v1, "test", "test"); err != nil {
		t.Fatal(err)
	}
	// The holder's step stops at the fence of its end, behind the closed
	// gate (issue 25), and both nodes end cancelled; or, had its end
	// passed its fence first, converged.
	g.WaitFor(time.Minute, "the holder settled and the waiter cancelled", func() bool {
		gs, err := g.Store.Read(ctx, g.Name, nil)
		if err != nil || gs.Holders == nil || len(gs.Holders.Counted()) > 0 {
			return false
		}
		settled := 0
		for _, n := range gs.Nodes {
			if n.State == coordinator.StateCancelled || n.State == coordinator.StateConverged && n.SHA == v1 {
				settled++
			}
		}
		return settled == 2 && nodeIn(gs, coordinator.StateCancelled)
	})
	noSessions(t, c, g.Name, "once the waiter is cancelled")
	commit("2")
	g.WaitFor(time.Minute, "the rollout of 2", func() bool {
		gs, err := g.Store.Read(ctx, g.Name, nil)
		return err == nil && gs.Progress().Converged == 2
	})
	noSessions(t, c, g.Name, "once the rollout is done")
	g.WaitFor(10*time.Second, "no session check left", func() bool {
		return len(sessionChecks(t, c, g.Name, false)) == 0
	})
}

// sessionChecks lists the agent's session checks of group's agents; with
// onService, only those a service carries.
func sessionChecks(t *testing.T, c *api.Client, group string, onService bool) []string {
	t.Helper()
	checks, err := c.Agent().Checks()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for id, ch := range checks {
		for _, n := range []string{"n1", "n2"} {
			if strings.HasPrefix(id, "rollagent-"+group+"-"+n+"-session-") && (!onService || ch.ServiceID != "") {
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// noSessions waits, bounded, for the group's agents to have no session.
func noSessions(t *testing.T, c *api.Client, group, when string) {
	t.Helper()
	last := ""
	testkit.Eventually(t, 30*time.Second, "no session left to the idle agents "+when, func() bool {
		left, err := agentSessions(c, group)
		if now := fmt.Sprint(left, err); now != last {
			t.Logf("sessions of the group's agents %s: %s", when, now)
			last = now
		}
		return err == nil && len(left) == 0
	})
}

func nodeIn(gs *coordinator.GroupState, state coordinator.NodeStatus) bool {
	for _, n := range gs.Nodes {
		if n.State == state {
			return true
		}
	}
	return false
}

// agentSessions names the sessions of group's agents.
func agentSessions(c *api.Client, group string) ([]string, error) {
	all, _, err := c.Session().List(nil)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, s := range all {
		if strings.HasPrefix(s.Name, "rollagent-"+group+"-") {
			out = append(out, s.Name)
		}
	}
	return out, nil
}
