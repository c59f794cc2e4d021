package agent_test

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/fleettest"
)

// commitBlocked commits a release that blocks on the Consul checks on
// (update.block_on) and onNode (update.block_on_node).
func (f *windowFleet) commitBlocked(release string, on, onNode []hashspec.Block) string {
	return commitBlockedTo(f.t, f.st, f.group, release, on, onNode)
}

func commitBlockedTo(t *testing.T, st *coordinator.Store, group, release string, on, onNode []hashspec.Block) string {
	t.Helper()
	s := recordingSpec(t, group, release, "")
	s.Update.BlockOn, s.Update.BlockOnNode = on, onNode
	return commitSpec(t, st, group, release, s)
}

// registerTTLCheck registers a node check with a TTL on the Consul agent
// of c, in status.
func registerTTLCheck(t *testing.T, c *api.Client, id, status string) {
	t.Helper()
	if err := c.Agent().CheckRegister(&api.AgentCheckRegistration{ID: id, Name: id,
		AgentServiceCheck: api.AgentServiceCheck{TTL: "10m", Status: status}}); err != nil {
		t.Fatal(err)
	}
}

func setTTL(t *testing.T, c *api.Client, id, status string) time.Time {
	t.Helper()
	if err := c.Agent().UpdateTTL(id, "", status); err != nil {
		t.Fatal(err)
	}
	return time.Now()
}

// A rollout committed while a service it blocks on is critical holds,
// through a restart of every agent: no node's replacement begins before
// the check passes, and every node says which check it waits for; once
// it passes, every node converges.
func TestBlockHoldsRolloutUntilTheCheckPasses(t *testing.T) {
	nodes := []string{"n1", "n2", "n3"}
	f := newWindowFleet(t, nodes, 0)
	c := f.consul
	err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: "pg1", Name: "postgres", Tags: []string{"primary"},
		Check: &api.AgentServiceCheck{CheckID: "pg1-alive", Name: "pg1 alive", TTL: "10m", Status: api.HealthCritical}})
	if err != nil {
		t.Fatal(err)
	}
	critical := time.Now()
	v2 := f.commitBlocked("v2", []hashspec.Block{{Service: "postgres", Tag: "primary"}}, nil)
	blocked := func(s *coordinator.NodeState) bool {
		return s.State == coordinator.StateWaiting && strings.HasPrefix(s.Error, `blocked by Consul check "pg1 alive" (critical) on node `) &&
			len(s.Blocked) == 1 && s.Blocked[0].CheckID == "pg1-alive"
	}
	for _, n := range nodes {
		waitNode(t, f.st, f.group, n, "blocked by the primary's check", blocked)
	}
	f.waitUIGate(nodes, coordinator.GateBlockedByCheck, `blocked by Consul check "pg1 alive" (critical) on node `)
	since := f.blockedSince(critical, time.Now())
	f.restartAll(nodes)
	time.Sleep(3 * coordinator.BlockRecheck)
	for _, n := range nodes {
		waitNode(t, f.st, f.group, n, "still blocked after its restart", blocked)
	}
	if again := f.blockedSince(critical, time.Now()); !again.Equal(since) {
		t.Errorf("blocked since %s after every agent's restart, want %s: the check never passed", again, since)
	}
	passed := setTTL(t, c, "pg1-alive", api.HealthPassing)
	f.waitConverged(nodes, v2)
	f.beganFrom(nodes, v2, passed, "the check passed")
}

// blockedSince is when the group's reader says its first failing check
// began to fail (status's "since"), which must lie between from and to, as
// its reason says.
func (f *windowFleet) blockedSince(from, to time.Time) time.Time {
	f.t.Helper()
	h := f.state().Health
	if h == nil || len(h.Failing) == 0 {
		f.t.Fatalf("health %+v, want a failing check", h)
	}
	since := h.Failing[0].Since
	if since.Before(from.Truncate(time.Second)) || since.After(to) {
		f.t.Fatalf("blocked since %s, want between %s and %s", since, from, to)
	}
	if !strings.HasSuffix(h.Failing[0].String(), ", since "+since.UTC().Format(time.RFC3339)) {
		f.t.Errorf("reason %q does not say since when", h.Failing[0].String())
	}
	return since
}

// A check that fails mid-rollout: the node mid-step finishes its step and
// converges, no replacement begins after the flip (a node in line leaves
// it), and the nodes left say which check blocks them; once it passes
// again, they converge.
func TestBlockCheckFailedMidRolloutLetsTheHolderFinish(t *testing.T) {
	nodes := []string{"n1", "n2", "n3"}
	f := newWindowFleet(t, nodes, 6*time.Second)
	c := f.consul
	registerTTLCheck(t, c, "replication-lag", api.HealthPassing)
	v2 := f.commitBlocked("v2", []hashspec.Block{{Check: "replication-lag"}}, nil)
	var first string
	fleettest.WaitFor(t, time.Minute, "a first replacement to begin", func() bool {
		for _, n := range nodes {
			if _, ok := f.rts[n].beganAt(v2); ok {
				first = n
				return true
			}
		}
		return false
	})
	flip := setTTL(t, c, "replication-lag", api.HealthCritical)
	f.waitConverged([]string{first}, v2)
	var left []string
	for _, n := range nodes {
		if at, ok := f.rts[n].beganAt(v2); ok && at.After(flip) {
			t.Errorf("%s began replacing at %s, after the check failed at %s", n, at.Format(time.StampMilli), flip.Format(time.StampMilli))
		} else if !ok {
			left = append(left, n)
		}
	}
	if len(left) == 0 {
		t.Fatal("every node began: the flip came too late to test anything")
	}
	for _, n := range left {
		waitNode(t, f.st, f.group, n, "blocked by the lag check", func(s *coordinator.NodeState) bool {
			return s.State == coordinator.StateWaiting && strings.HasPrefix(s.Error, `blocked by Consul check "replication-lag" (critical)`)
		})
	}
	gs := f.state()
	if gs.Holders != nil && len(gs.Holders.Holding)+len(gs.Holders.Waiting) > 0 {
		t.Errorf("while blocked, holders %v and waiters %v remain", gs.Holders.Holding, gs.Holders.Waiting)
	}
	setTTL(t, c, "replication-lag", api.HealthPassing)
	f.waitConverged(nodes, v2)
}

// block_on_node blocks only the node on whose Consul node the check fails:
// two nodes on Consul client agents of their own, one disk critical.
func TestBlockOnNodeHoldsOnlyItsNode(t *testing.T) {
	srv := consultest.NewDev(t)
	clients := consultest.NewClients(t, srv, 2, "")
	group := fleettest.Group("blocknode")
	nodes := []string{"n1", "n2"}
	stores := map[string]*coordinator.Store{}
	rts := map[string]*timedRuntime{}
	for i, n := range nodes {
		stores[n] = coordinator.NewStore(clients[i].Client(), coordinator.DefaultPrefix)
		rts[n] = newTimed(0)
	}
	st := stores["n1"]
	v1 := commitRecording(t, st, group, "v1", "")
	for _, n := range nodes {
		startAgent(t, stores[n], group, n, rts[n], agent.Allow{})
	}
	converged := func(sha string) func(s *coordinator.NodeState) bool {
		return func(s *coordinator.NodeState) bool { return s.SHA == sha && s.State == coordinator.StateConverged }
	}
	for _, n := range nodes {
		waitNode(t, st, group, n, "converged on v1", converged(v1))
	}
	registerTTLCheck(t, clients[0].Client(), "disk", api.HealthCritical)
	registerTTLCheck(t, clients[1].Client(), "disk", api.HealthPassing)
	v2 := commitBlockedTo(t, st, group, "v2", nil, []hashspec.Block{{Check: "disk"}})
	waitNode(t, st, group, "n2", "converged on v2", converged(v2))
	waitNode(t, st, group, "n1", "blocked by its disk", func(s *coordinator.NodeState) bool {
		return s.State == coordinator.StateWaiting && s.Error == `blocked by Consul check "disk" (critical) on node `+clients[0].Name
	})
	if _, ok := rts["n1"].beganAt(v2); ok {
		t.Fatal("n1 began replacing with its disk check critical")
	}
	passed := setTTL(t, clients[0].Client(), "disk", api.HealthPassing)
	waitNode(t, st, group, "n1", "converged on v2", converged(v2))
	if at, _ := rts["n1"].beganAt(v2); at.Before(passed) {
		t.Errorf("n1 began replacing at %s, before its disk passed at %s", at.Format(time.StampMilli), passed.Format(time.StampMilli))
	}
}

// A check that fails while a node heads the line, waiting on a full slot,
// stops that node's grant once the slot frees, however soon: the agent
// reads the checks right before the grant's transaction, not only at its
// watch's tick (every 2 s), which the slot freeing a few milliseconds
// after the flip would outrun. The holder finishes its step; the node in
// line begins only once the check passes again.
func TestBlockCheckFailedAtTheHeadOfTheLineStopsTheGrant(t *testing.T) {
	nodes := []string{"n1", "n2"}
	f := newWindowFleet(t, nodes, 0)
	c := f.consul
	registerTTLCheck(t, c, "replication-lag", api.HealthPassing)
	releases := map[string]func(){}
	for _, n := range nodes {
		releases[n] = f.rts[n].holdSteps()
		t.Cleanup(releases[n])
	}
	v2 := f.commitBlocked("v2", []hashspec.Block{{Check: "replication-lag"}}, nil)
	first, second := "", ""
	fleettest.WaitFor(t, time.Minute, "a first replacement to begin, the other node in line", func() bool {
		for i, n := range nodes {
			if _, ok := f.rts[n].beganAt(v2); ok {
				first, second = n, nodes[1-i]
			}
		}
		gs := f.state()
		return first != "" && gs.Holders != nil && len(gs.Holders.Waiting) == 1
	})
	setTTL(t, c, "replication-lag", api.HealthCritical)
	fleettest.WaitFor(t, 10*time.Second, "Consul's health API to show the check critical", func() bool {
		checks, _, err := c.Health().State(api.HealthAny, &api.QueryOptions{Filter: `Name == "replication-lag"`})
		return err == nil && len(checks) == 1 && checks[0].Status == api.HealthCritical
	})
	releases[first]() // the slot frees within milliseconds of the flip
	f.waitConverged([]string{first}, v2)
	fleettest.WaitFor(t, time.Minute, second+" to be blocked by the lag check, or granted", func() bool {
		if _, ok := f.rts[second].beganAt(v2); ok {
			return true
		}
		s := nodeState(t, f.st, f.group, second)
		return s != nil && s.State == coordinator.StateWaiting && strings.HasPrefix(s.Error, `blocked by Consul check "replication-lag" (critical)`)
	})
	if at, ok := f.rts[second].beganAt(v2); ok {
		t.Fatalf("%s began replacing at %s, granted with the check critical", second, at.Format(time.StampMilli))
	}
	passed := setTTL(t, c, "replication-lag", api.HealthPassing)
	releases[second]()
	f.waitConverged(nodes, v2)
	f.beganFrom([]string{second}, v2, passed, "the check passed")
}
