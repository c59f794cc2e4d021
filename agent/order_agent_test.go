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
	"github.com/rollagent/rollagent/internal/testkit/groupkit"
)

// commitOrdered commits a release of group with update.after and
// update.last (optional, "" for none).
func commitOrdered(t *testing.T, st *coordinator.Store, group, release string, after []string, last string) string {
	t.Helper()
	s := recordingSpec(t, group, release, "")
	s.Update.After = after
	if last != "" {
		s.Update.Last = &hashspec.Last{Check: last}
	}
	return commitSpec(t, st, group, release, s)
}

// convergedAt is when each of nodes converged on sha, as its record in
// Consul says, and the latest of them.
func convergedAt(t *testing.T, st *coordinator.Store, group string, nodes []string, sha string) (map[string]time.Time, time.Time) {
	t.Helper()
	at := map[string]time.Time{}
	var latest time.Time
	for _, n := range nodes {
		s := nodeState(t, st, group, n)
		if s == nil || s.SHA != sha || s.State != coordinator.StateConverged {
			t.Fatalf("%s: record %+v, want converged on %s", n, s, sha[:12])
		}
		at[n] = s.Since
		if s.Since.After(latest) {
			latest = s.Since
		}
	}
	return at, latest
}

// Two groups on one Consul, the seed's order: the managers' release is
// committed, then the workers' with update.after = [managers]. The
// workers hold, through a restart of their agents, with the gate
// waiting_for_group, until the managers converge; from Consul's records,
// no worker's replacement began before the last manager converged.
func TestAfterWorkersWaitForManagers(t *testing.T) {
	srv := consultest.NewDev(t)
	managers := []string{"m1", "m2", "m3"}
	workers := []string{"w1", "w2"}
	mf := newWindowFleetOn(t, groupkit.On(t, srv, "managers"), managers, 2*time.Second)
	wf := newWindowFleetOn(t, groupkit.On(t, srv, "workers"), workers, 0)
	mv2 := commitOrdered(t, mf.st, mf.group, "v2", nil, "")
	wv2 := commitOrdered(t, wf.st, wf.group, "v2", []string{mf.group}, "")
	for _, n := range workers {
		waitNode(t, wf.st, wf.group, n, "waiting for the managers", func(s *coordinator.NodeState) bool {
			return s.State == coordinator.StateWaiting && s.Gate == coordinator.GateWaitingForGroup &&
				strings.HasPrefix(s.Error, "waiting for group "+mf.group+" (")
		})
	}
	wf.waitUIGate(workers, coordinator.GateWaitingForGroup, "waiting for group "+mf.group+" (")
	wf.restartAll(workers)
	mf.waitConverged(managers, mv2)
	wf.waitConverged(workers, wv2)
	_, last := convergedAt(t, mf.st, mf.group, managers, mv2)
	wf.beganFrom(workers, wv2, last, "the last manager converged")
}

// lastFleet is three nodes of one group, each on a Consul client agent of
// its own, so that a node check (the leader's) passes on one of them.
type lastFleet struct {
	*groupkit.Group // its Client and Store are the test's own, on the server
	t               *testing.T
	nodes           []string
	clients         map[string]*api.Client
	rts             map[string]*timedRuntime
}

func newLastFleet(t *testing.T, slow time.Duration) *lastFleet {
	f := &lastFleet{Group: groupkit.New(t, "last"), t: t, nodes: []string{"n1", "n2", "n3"},
		clients: map[string]*api.Client{}, rts: map[string]*timedRuntime{}}
	cls := consultest.NewClients(t, f.Srv, len(f.nodes), "")
	v1 := commitRecording(t, f.Store, f.Name, "v1", "")
	for i, n := range f.nodes {
		f.clients[n] = cls[i].Client()
		registerTTLCheck(t, f.clients[n], "raft-leader", api.HealthCritical)
		f.rts[n] = newTimed(slow)
		startAgent(t, coordinator.NewStore(f.clients[n], coordinator.DefaultPrefix), f.Name, n, f.rts[n], agent.Allow{})
	}
	for _, n := range f.nodes {
		waitNode(t, f.Store, f.Name, n, "converged on v1", func(s *coordinator.NodeState) bool {
			return s.SHA == v1 && s.State == coordinator.StateConverged
		})
	}
	return f
}

// lead makes the leader check pass on node alone, and waits until the
// catalog, which the agents read, says so; it returns when it did.
func (f *lastFleet) lead(node string) time.Time {
	f.t.Helper()
	for _, n := range f.nodes {
		status := api.HealthCritical
		if n == node {
			status = api.HealthPassing
		}
		setTTL(f.t, f.clients[n], "raft-leader", status)
	}
	name, err := f.clients[node].Agent().NodeName()
	if err != nil {
		f.t.Fatal(err)
	}
	f.WaitFor(10*time.Second, "the catalog to have the leader check passing on "+node+" alone", func() bool {
		checks, _, err := f.Client.Health().State(api.HealthPassing, &api.QueryOptions{Filter: `CheckID == "raft-leader"`})
		return err == nil && len(checks) == 1 && checks[0].Node == name
	})
	return time.Now()
}

// wentLast checks, from Consul's records, that leader's replacement to sha
// began after every other node had converged on it.
func (f *lastFleet) wentLast(leader, sha string) {
	f.t.Helper()
	for _, n := range f.nodes {
		waitNode(f.t, f.Store, f.Name, n, "converged on "+sha[:12], func(s *coordinator.NodeState) bool {
			return s.SHA == sha && s.State == coordinator.StateConverged
		})
	}
	var others []string
	for _, n := range f.nodes {
		if n != leader {
			others = append(others, n)
		}
	}
	_, last := convergedAt(f.t, f.Store, f.Name, others, sha)
	if at, ok := f.rts[leader].beganAt(sha); !ok || at.Before(last) {
		f.t.Errorf("the leader %s began replacing at %s (ok %v), before the last other node converged at %s",
			leader, at.Format(time.StampMilli), ok, last.Format(time.StampMilli))
	}
}

// update.last on a TTL check the test moves: the node it passes on moves
// last; when the test moves it mid-rollout to a node that has not begun,
// that node moves last, and the old leader goes when its turn comes.
func TestLastLeaderGoesLast(t *testing.T) {
	f := newLastFleet(t, 3*time.Second)
	f.lead("n2")
	v2 := commitOrdered(t, f.Store, f.Name, "v2", nil, "raft-leader")
	waitNode(t, f.Store, f.Name, "n2", "waiting to go last", func(s *coordinator.NodeState) bool {
		return s.State == coordinator.StateWaiting && s.Gate == coordinator.GateWaitingToGoLast
	})
	ui := &windowFleet{t: t, consul: f.Client, group: f.Name} // the Consul UI's view, through the catalog
	ui.waitUIGate([]string{"n2"}, coordinator.GateWaitingToGoLast, `waits to go last (check "raft-leader"`)
	f.wentLast("n2", v2)

	v3 := commitOrdered(t, f.Store, f.Name, "v3", nil, "raft-leader")
	var first string
	f.WaitFor(time.Minute, "a first replacement to begin", func() bool {
		for _, n := range f.nodes {
			if _, ok := f.rts[n].beganAt(v3); ok {
				first = n
				return true
			}
		}
		return false
	})
	if first == "n2" {
		t.Fatal("the leader began first")
	}
	next := "n1"
	if first == "n1" {
		next = "n3"
	}
	f.lead(next)
	if _, ok := f.rts[next].beganAt(v3); ok {
		t.Fatalf("%s began before the check moved to it: the move came too late to test anything", next)
	}
	f.wentLast(next, v3)
}
