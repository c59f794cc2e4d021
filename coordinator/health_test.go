package coordinator_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/testkit"
	"github.com/rollagent/rollagent/internal/testkit/groupkit"
)

// A node of the group whose agent's liveness check is critical is
// unavailable; one whose checks pass, one whose workload alone is
// unhealthy (its agent acts for itself), and another group's, are not.
func TestUnavailable(t *testing.T) {
	_, c, st := groupkit.Dev(t)
	reg := func(group, node, alive, workload string) {
		t.Helper()
		err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: coordinator.ServiceID(group, node),
			Name: coordinator.ServiceName(group), Checks: api.AgentServiceChecks{
				{CheckID: node + group, TTL: "1m", Status: alive},
				{CheckID: coordinator.WorkloadCheckID(group, node), TTL: "1m", Status: workload}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	reg("web", "n1", api.HealthPassing, api.HealthPassing)
	reg("web", "n2", api.HealthCritical, api.HealthPassing)
	reg("web", "n4", api.HealthPassing, api.HealthCritical)
	reg("db", "n3", api.HealthCritical, api.HealthCritical)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := st.Unavailable(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{"n2"}) {
		t.Fatalf("Unavailable = %v, want [n2]", got)
	}
	if err := c.Agent().UpdateTTL("n2web", "back", api.HealthPassing); err != nil {
		t.Fatal(err)
	}
	if got, err := st.Unavailable(ctx, "web"); err != nil || len(got) != 0 {
		t.Fatalf("Unavailable = %v, %v once n2 passes, want none", got, err)
	}
}

// The operator's way to stop a host that will not come back from counting
// against max_parallel: `consul force-leave -prune <node>` removes its
// Consul node, and the service instance with it, from the catalog at once,
// instead of after the reconnect timeout (72 h by default). Unavailable
// then no longer lists it. A persistent server with Consul's default gossip
// settings, not -dev, so the kill is found as slowly as in production.
func TestUnavailableForgetsANodeForcedToLeave(t *testing.T) {
	srv := consultest.New(t, consultest.Options{Persistent: true})
	host := consultest.NewClients(t, srv, 1, "")[0]
	err := host.Client().Agent().ServiceRegister(&api.AgentServiceRegistration{
		ID: coordinator.ServiceID("web", "n2"), Name: coordinator.ServiceName("web"),
		// Passing, and refreshed by nobody once the host dies: the catalog
		// keeps it passing, so only serfHealth can show n2 is down.
		Check: &api.AgentServiceCheck{CheckID: "n2web", TTL: "10m", Status: api.HealthPassing}})
	if err != nil {
		t.Fatal(err)
	}
	c := srv.Client()
	st := coordinator.NewStore(c, coordinator.DefaultPrefix)
	// The client agent syncs its registration to the servers on its own
	// time; killed before that, it would leave nothing of n2 in the catalog
	// for serfHealth to mark.
	waitInstances(t, c, 1, 10*time.Second)
	killed := time.Now()
	host.Kill()
	waitUnavailable(t, st, []string{"n2"}, 60*time.Second)
	begin := time.Now()
	t.Logf("kill to n2 unavailable: %s", begin.Sub(killed).Round(time.Millisecond))
	if err := c.Agent().ForceLeavePrune(host.Name); err != nil {
		t.Fatalf("force-leave -prune %s: %v", host.Name, err)
	}
	waitUnavailable(t, st, nil, 60*time.Second)
	t.Logf("force-leave -prune to n2 not unavailable: %s", time.Since(begin).Round(time.Millisecond))
	nodes, _, err := c.Catalog().Nodes(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if n.Node == host.Name {
			t.Fatalf("catalog still has node %s after force-leave -prune", n.Node)
		}
	}
	waitInstances(t, c, 0, time.Second)
}

// waitInstances polls the catalog every 100 ms until group web's service
// has want instances, failing the test after bound.
func waitInstances(t *testing.T, c *api.Client, want int, bound time.Duration) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for {
		inst, _, err := c.Catalog().Service(coordinator.ServiceName("web"), "", nil)
		if err == nil && len(inst) == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("catalog has %d instances of web, %v, after %s; want %d", len(inst), err, bound, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitUnavailable polls Unavailable for group web every 100 ms until it
// equals want, failing the test after bound: Consul's gossip and the
// leader's reconcile are asynchronous, so there is no index to block on
// that covers both.
func waitUnavailable(t *testing.T, st *coordinator.Store, want []string, bound time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	var got []string
	var err error
	if !testkit.PollEvery(bound, 100*time.Millisecond, func() bool {
		got, err = st.Unavailable(ctx, "web")
		return err == nil && slices.Equal(got, want)
	}) {
		t.Fatalf("Unavailable = %v, %v after %s, want %v", got, err, bound, want)
	}
}

// Down names every node that counts as down, and why, from Consul's
// health checks, its catalog and the nodes' records: a node whose agent
// stopped cleanly counts until its agent is back, as host_down while its
// host is down, and still once its host left the catalog (a reboot's
// graceful leave, a forced one); a workload not healthy (critical, or
// warning while it starts) counts once something was deployed.
func TestDownReasons(t *testing.T) {
	srv := consultest.NewDev(t)
	host := consultest.NewClients(t, srv, 1, "")[0]
	c := srv.Client()
	st := coordinator.NewStore(c, coordinator.DefaultPrefix)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const sha = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	stopped := time.Now().UTC()
	put := func(n coordinator.NodeState) {
		t.Helper()
		n.State, n.Since = coordinator.StateConverged, time.Now().UTC()
		if err := st.PutNode(ctx, "web", n); err != nil {
			t.Fatal(err)
		}
	}
	reg := func(node, workload string) {
		t.Helper()
		err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: coordinator.ServiceID("web", node),
			Name: coordinator.ServiceName("web"), Checks: api.AgentServiceChecks{
				{CheckID: coordinator.WorkloadCheckID("web", node), TTL: "1m", Status: workload}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	reg("crashed", api.HealthCritical)
	put(coordinator.NodeState{Node: "crashed", SHA: sha})
	reg("starting", api.HealthWarning) // restarted, Docker's health still starting
	put(coordinator.NodeState{Node: "starting", SHA: sha})
	reg("first", api.HealthCritical) // a first deploy: nothing ran yet
	put(coordinator.NodeState{Node: "first"})
	put(coordinator.NodeState{Node: "never", Stopped: &stopped}) // stopped before its first deploy
	reg("back", api.HealthPassing)                               // stopped once, back: its record rewritten
	put(coordinator.NodeState{Node: "back", SHA: sha})
	reg("stopping", api.HealthPassing) // marked, its service not gone yet
	put(coordinator.NodeState{Node: "stopping", SHA: sha, Stopped: &stopped})
	put(coordinator.NodeState{Node: "rebooting", SHA: sha, ConsulNode: host.Name, Stopped: &stopped})
	// Its host left the catalog as it went down (a reboot's graceful
	// leave): still nothing vouches for its workload.
	put(coordinator.NodeState{Node: "left", SHA: sha, ConsulNode: "left-the-catalog", Stopped: &stopped})
	put(coordinator.NodeState{Node: "old", SHA: sha, Stopped: &stopped}) // its agent never said its Consul node

	want := map[string]coordinator.DownReason{"crashed": coordinator.DownWorkload, "starting": coordinator.DownWorkload,
		"rebooting": coordinator.DownAgentStopped, "stopping": coordinator.DownAgentStopped, "old": coordinator.DownAgentStopped,
		"left": coordinator.DownAgentStopped}
	waitDown(t, st, want, 10*time.Second)
	host.Kill()
	want["rebooting"] = coordinator.DownHost
	waitDown(t, st, want, time.Minute)
	if err := c.Agent().ForceLeavePrune(host.Name); err != nil {
		t.Fatal(err)
	}
	want["rebooting"] = coordinator.DownAgentStopped // out of the catalog, not back
	waitDown(t, st, want, time.Minute)
}

// waitDown polls Down for group web every 100 ms until it equals want,
// failing the test after bound.
func waitDown(t *testing.T, st *coordinator.Store, want map[string]coordinator.DownReason, bound time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	var got map[string]coordinator.DownReason
	var err error
	if !testkit.PollEvery(bound, 100*time.Millisecond, func() bool {
		got, err = st.Down(ctx, "web")
		return err == nil && maps.Equal(got, want)
	}) {
		t.Fatalf("Down = %v, %v after %s, want %v", got, err, bound, want)
	}
}

// A node the operator removed leaves the count although its dead agent's
// service stays in the catalog, failing; one that never had a record (its
// agent starting) still counts; the removed node's agent back, writing its
// record, counts again.
func TestRemovedNodeLeavesTheCount(t *testing.T) {
	_, c, st := groupkit.Dev(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, n := range []string{"dead", "starting"} {
		err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: coordinator.ServiceID("web", n),
			Name: coordinator.ServiceName("web"), Check: &api.AgentServiceCheck{CheckID: n + "-alive", TTL: "1m", Status: api.HealthCritical}})
		if err != nil {
			t.Fatal(err)
		}
	}
	rec := coordinator.NodeState{Node: "dead", SHA: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		State: coordinator.StateConverged, Since: time.Now().UTC()}
	if err := st.PutNode(ctx, "web", rec); err != nil {
		t.Fatal(err)
	}
	both := map[string]coordinator.DownReason{"dead": coordinator.DownAgent, "starting": coordinator.DownAgent}
	waitDown(t, st, both, 10*time.Second)
	if _, err := st.RemoveNode(ctx, "web", "dead", false, "ops", "host decommissioned"); !errors.Is(err, coordinator.ErrNodeAlive) {
		t.Fatalf("unforced removal of a registered node: %v, want ErrNodeAlive", err)
	}
	waitDown(t, st, both, 10*time.Second)
	if _, err := st.RemoveNode(ctx, "web", "dead", true, "ops", "host decommissioned"); err != nil {
		t.Fatal(err)
	}
	waitDown(t, st, map[string]coordinator.DownReason{"starting": coordinator.DownAgent}, 10*time.Second)
	// A record that does not decode is a record still: the mark no longer
	// speaks for the node.
	k, _ := st.Keys("web")
	if _, err := c.KV().Put(&api.KVPair{Key: k.Node("dead"), Value: []byte("{")}, nil); err != nil {
		t.Fatal(err)
	}
	waitDown(t, st, both, 10*time.Second)
	rec.Since = time.Now().UTC()
	if err := st.PutNode(ctx, "web", rec); err != nil { // its agent is back
		t.Fatal(err)
	}
	waitDown(t, st, both, 10*time.Second)
}
