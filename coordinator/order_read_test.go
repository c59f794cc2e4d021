package coordinator_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/testkit"
)

func orderSpec(t *testing.T, after []string, last string) *hashspec.Spec {
	t.Helper()
	s := &hashspec.Spec{Container: hashspec.Container{Image: "demo:v1"}, Update: hashspec.Update{After: after}}
	if last != "" {
		s.Update.Last = &hashspec.Last{Check: last}
	}
	d := s.WithDefaults()
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	return &d
}

// A commit whose update.after closes a cycle is refused, naming the
// cycle, and writes nothing; a group named with nothing committed is no
// cycle: the commit goes in and the group holds.
func TestAfterCycleRefusedAtCommit(t *testing.T) {
	srv := consultest.NewDev(t)
	st := coordinator.NewStore(srv.Client(), coordinator.DefaultPrefix)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	commit := func(group string, after ...string) error {
		_, err := st.Commit(ctx, group, orderSpec(t, after, ""), "op", "order")
		return err
	}
	if err := commit("managers", "workers"); err != nil {
		t.Fatalf("managers after workers, nothing committed to workers: %v", err)
	}
	for _, tc := range []struct {
		group string
		after []string
		want  string
	}{
		{"workers", []string{"managers"}, "group workers waits for group managers, which waits for group workers"},
		{"workers", []string{"db", "managers"}, "group workers waits for group managers, which waits for group workers"},
		{"web", []string{"web"}, "group web names itself"},
	} {
		err := commit(tc.group, tc.after...)
		if !errors.Is(err, coordinator.ErrAfterCycle) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("commit %s after %q: %v, want %v naming %q", tc.group, tc.after, err, coordinator.ErrAfterCycle, tc.want)
		}
		if p, _, err := srv.Client().KV().Get(coordinator.DefaultPrefix+tc.group+"/desired", nil); err != nil || p != nil {
			t.Errorf("a refused commit wrote %s's desired: %v %v", tc.group, p, err)
		}
	}
	// Three groups: a after b, b after c; c after a closes it.
	if err := commit("a", "b"); err != nil {
		t.Fatal(err)
	}
	if err := commit("b", "c"); err != nil {
		t.Fatal(err)
	}
	err := commit("c", "a")
	if want := "group c waits for group a waits for group b, which waits for group c"; !errors.Is(err, coordinator.ErrAfterCycle) || !strings.Contains(err.Error(), want) {
		t.Errorf("commit c after a: %v, want %q", err, want)
	}
	if err := commit("workers", "b"); err != nil {
		t.Errorf("workers after b, no cycle: %v", err)
	}
}

// Read and ReadFor read the progress of the groups of update.after from
// their records: the gate holds until each has converged on its own
// desired SHA, and names how far it is.
func TestAfterProgressFromConsul(t *testing.T) {
	srv := consultest.NewDev(t)
	st := coordinator.NewStore(srv.Client(), coordinator.DefaultPrefix)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := st.Commit(ctx, "workers", orderSpec(t, []string{"managers"}, ""), "op", "order"); err != nil {
		t.Fatal(err)
	}
	gate := func() coordinator.Verdict {
		t.Helper()
		gs, err := st.ReadFor(ctx, "workers", "w1")
		if err != nil {
			t.Fatal(err)
		}
		all, err := st.Read(ctx, "workers", nil)
		if err != nil {
			t.Fatal(err)
		}
		if v, w := gs.Gate(), all.Gate(); v.State != w.State || v.Reason != w.Reason {
			t.Fatalf("ReadFor's gate %s %q, Read's %s %q: they must agree", v.State, v.Reason, w.State, w.Reason)
		}
		return gs.Gate()
	}
	if v := gate(); v.State != coordinator.GateWaitingForGroup || v.Reason != "waiting for group managers (nothing committed)" {
		t.Fatalf("managers not committed: %s %q", v.State, v.Reason)
	}
	res, err := st.Commit(ctx, "managers", orderSpec(t, nil, ""), "op", "managers")
	if err != nil {
		t.Fatal(err)
	}
	put := func(node, sha string, state coordinator.NodeStatus) {
		t.Helper()
		n := coordinator.NodeState{Node: node, SHA: sha, Desired: res.SHA, State: state, Since: time.Now()}
		if err := st.PutNode(ctx, "managers", n); err != nil {
			t.Fatal(err)
		}
	}
	put("m1", res.SHA, coordinator.StateConverged)
	put("m2", res.SHA, coordinator.StateConverged)
	put("m3", "", coordinator.StateWaiting)
	want := "waiting for group managers (2 of 3 converged on " + coordinator.ShortSHA(res.SHA) + ")"
	if v := gate(); v.State != coordinator.GateWaitingForGroup || v.Reason != want || !v.Hold || !v.Poll {
		t.Fatalf("2 of 3 managers converged: %+v, want a polled hold %q", v, want)
	}
	put("m3", res.SHA, coordinator.StateConverged)
	if v := gate(); !v.Open {
		t.Fatalf("every manager converged: %s %q, want open", v.State, v.Reason)
	}
}

// A node of an update.after group gone from Consul's catalog counts for
// the store's lost-after (WithLostAfter), by default DefaultLostAfter, as
// status counts it: a node gone for 5 minutes still holds the gate by
// default, and is lost after one.
func TestAfterCountsLostAsTheStoreSays(t *testing.T) {
	srv := consultest.NewDev(t)
	st := coordinator.NewStore(srv.Client(), coordinator.DefaultPrefix)
	ctx := testkit.Context(t, time.Minute)
	if _, err := st.Commit(ctx, "workers", orderSpec(t, []string{"managers"}, ""), "op", "order"); err != nil {
		t.Fatal(err)
	}
	res, err := st.Commit(ctx, "managers", orderSpec(t, nil, ""), "op", "managers")
	if err != nil {
		t.Fatal(err)
	}
	// Neither is in the catalog: m1 changed just now, m2 five minutes ago.
	for _, n := range []coordinator.NodeState{
		{Node: "m1", SHA: res.SHA, Desired: res.SHA, State: coordinator.StateConverged, Since: time.Now()},
		{Node: "m2", Desired: res.SHA, State: coordinator.StateWaiting, Since: time.Now().Add(-5 * time.Minute)},
	} {
		if err := st.PutNode(ctx, "managers", n); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		st   *coordinator.Store
		open bool
	}{
		{"by default", st, false},
		{"lost after 10m", st.WithLostAfter(coordinator.DefaultLostAfter), false},
		{"lost after 1m", st.WithLostAfter(time.Minute), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gs, err := tc.st.ReadFor(ctx, "workers", "w1")
			if err != nil {
				t.Fatal(err)
			}
			if v := gs.Gate(); v.Open != tc.open {
				t.Fatalf("gate %s %q, want open=%v", v.State, v.Reason, tc.open)
			}
		})
	}
}

// update.last from Consul: the agent on the Consul node where the check
// passes holds while another node is behind; the others do not; status
// holds none and lists the leader's node; when the check moves, so does
// the hold.
func TestLastFromConsul(t *testing.T) {
	srv := consultest.NewDev(t)
	other := consultest.NewClients(t, srv, 1, "")[0]
	c, oc := srv.Client(), other.Client()
	st := coordinator.NewStore(c, coordinator.DefaultPrefix)
	otherSt := coordinator.NewStore(oc, coordinator.DefaultPrefix)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The check as the catalog has it (the agent syncs it there a moment
	// after the change), where the gate reads it.
	leaderCheck := func(client *api.Client, status string) {
		t.Helper()
		if err := client.Agent().CheckRegister(&api.AgentCheckRegistration{ID: "raft-leader", Name: "raft-leader",
			AgentServiceCheck: api.AgentServiceCheck{TTL: "10m", Status: status}}); err != nil {
			t.Fatal(err)
		}
		if err := client.Agent().UpdateTTL("raft-leader", "", status); err != nil {
			t.Fatal(err)
		}
		node, err := client.Agent().NodeName()
		if err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, 10*time.Second, "the catalog has the check "+status+" on "+node, func() bool {
			checks, _, err := c.Health().Node(node, nil)
			return err == nil && slices.ContainsFunc(checks, func(hc *api.HealthCheck) bool { return hc.CheckID == "raft-leader" && hc.Status == status })
		})
	}
	leaderCheck(c, api.HealthPassing)
	leaderCheck(oc, api.HealthCritical)
	res, err := st.Commit(ctx, "web", orderSpec(t, nil, "raft-leader"), "op", "last")
	if err != nil {
		t.Fatal(err)
	}
	here, err := c.Agent().NodeName()
	if err != nil {
		t.Fatal(err)
	}
	there, err := oc.Agent().NodeName()
	if err != nil {
		t.Fatal(err)
	}
	put := func(node, consulNode, sha string, state coordinator.NodeStatus) {
		t.Helper()
		n := coordinator.NodeState{Node: node, ConsulNode: consulNode, SHA: sha, Desired: res.SHA, State: state, Since: time.Now()}
		if err := st.PutNode(ctx, "web", n); err != nil {
			t.Fatal(err)
		}
	}
	put("n1", here, "", coordinator.StateWaiting)
	put("n2", there, "", coordinator.StateWaiting)
	gate := func(s *coordinator.Store, node string) coordinator.Verdict {
		t.Helper()
		gs, err := s.ReadFor(ctx, "web", node)
		if err != nil {
			t.Fatal(err)
		}
		return gs.Gate()
	}
	v := gate(st, "n1")
	if want := `waits to go last (check "raft-leader" passes on its Consul node ` + here + "): not converged yet: n2"; v.State != coordinator.GateWaitingToGoLast || v.Reason != want {
		t.Fatalf("the leader's node: %s %q, want %q", v.State, v.Reason, want)
	}
	if v := gate(otherSt, "n2"); !v.Open {
		t.Fatalf("a follower: %s %q, want open", v.State, v.Reason)
	}
	all, err := st.Read(ctx, "web", nil)
	if err != nil {
		t.Fatal(err)
	}
	if v := all.Gate(); !v.Open || !slices.Equal(all.LastWaiters(), []string{"n1"}) {
		t.Fatalf("status: gate %s, waiters %q; want open and [n1]", v.State, all.LastWaiters())
	}
	// Leadership moves to n2's node: n2 holds, n1 may go.
	leaderCheck(c, api.HealthCritical)
	leaderCheck(oc, api.HealthPassing)
	if v := gate(st, "n1"); !v.Open {
		t.Fatalf("the old leader: %s %q, want open", v.State, v.Reason)
	}
	if v := gate(otherSt, "n2"); v.State != coordinator.GateWaitingToGoLast {
		t.Fatalf("the new leader: %s %q, want %s", v.State, v.Reason, coordinator.GateWaitingToGoLast)
	}
	put("n1", here, res.SHA, coordinator.StateConverged)
	if v := gate(otherSt, "n2"); !v.Open {
		t.Fatalf("the new leader, every other node converged: %s %q, want open", v.State, v.Reason)
	}
}

// A plan of a spec with update.after meets the gate the commit would: the
// named groups are read for it.
func TestPlannedReadsTheGroupsOfAfter(t *testing.T) {
	srv := consultest.NewDev(t)
	st := coordinator.NewStore(srv.Client(), coordinator.DefaultPrefix)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := st.Commit(ctx, "workers", orderSpec(t, nil, ""), "op", "v1"); err != nil {
		t.Fatal(err)
	}
	gs, err := st.Read(ctx, "workers", nil)
	if err != nil {
		t.Fatal(err)
	}
	spec := orderSpec(t, []string{"managers"}, "")
	sha, err := spec.SHA()
	if err != nil {
		t.Fatal(err)
	}
	p := st.Planned(ctx, gs, spec, sha, time.Now())
	if v := p.Gate(); v.State != coordinator.GateWaitingForGroup || v.Reason != "waiting for group managers (nothing committed)" {
		t.Fatalf("planned gate: %s %q, want waiting for managers, nothing committed", v.State, v.Reason)
	}
}
