package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/dockertest"
	"github.com/rollagent/rollagent/internal/fleettest"
	"github.com/rollagent/rollagent/internal/testkit"
)

// garbageEnv is a group whose node n1 runs v1, converged by a real agent,
// and a v2 spec that is not committed: what a case writes over.
type garbageEnv struct {
	c      *api.Client
	k      coordinator.Keys
	group  string
	v1, v2 string // SHAs
	v2Hist []byte // a valid history record for v2
}

func (e *garbageEnv) put(t *testing.T, key, value string) {
	t.Helper()
	if _, err := e.c.KV().Put(&api.KVPair{Key: key, Value: []byte(value)}, nil); err != nil {
		t.Fatal(err)
	}
}

// touch rewrites desired as it is with the next Flags, as a cancel does:
// it wakes every agent of the group and changes nothing else.
func (e *garbageEnv) touch(t *testing.T) {
	t.Helper()
	p, _, err := e.c.KV().Get(e.k.Desired(), nil)
	if err != nil || p == nil {
		t.Fatalf("desired: %v %v", p, err)
	}
	p.Flags++
	if ok, _, err := e.c.KV().CAS(p, nil); err != nil || !ok {
		t.Fatalf("touch desired: %v %v", ok, err)
	}
}

type garbageCase struct {
	name    string
	inject  func(t *testing.T, e *garbageEnv)
	log     string // the agent's log must name the cause, of what it reads: not other nodes' records
	problem func(e *garbageEnv) string
	node    coordinator.NodeStatus // n1's state after
	nodeErr string                 // and its error
}

func garbageCases() []garbageCase {
	ghost := `{"holders":{"0b7d6d2e-0000-4000-8000-00000000dead":{"name":"ghost","state":"holding","since":"2026-01-01T00:00:00Z"}}}`
	return []garbageCase{
		{"garbage in desired", func(t *testing.T, e *garbageEnv) { e.put(t, e.k.Desired(), `{"sha": "`+e.v1[:20]) },
			"desired: not a valid record", func(e *garbageEnv) string { return e.k.Desired() + ": not a valid record" },
			coordinator.StateWaiting, "desired record is unreadable"},
		{"desired SHA missing from history", func(t *testing.T, e *garbageEnv) {
			e.put(t, e.k.Desired(), `{"sha":"`+e.v2+`","previous":"`+e.v1+`","committed_at":"2026-01-01T00:00:00Z"}`)
		}, "has no valid spec in history", func(e *garbageEnv) string { return coordinator.ShortSHA(e.v2) + " has no valid spec in history" },
			coordinator.StateWaiting, "missing from history"},
		{"truncated node state", func(t *testing.T, e *garbageEnv) {
			e.put(t, e.k.Node("n1"), `{"node":"n1","sha":"`+e.v1[:10])
			e.put(t, e.k.Node("n2"), `{"node":"n2","state":"conv`)
		}, "nodes/n1: not a valid record", func(e *garbageEnv) string { return e.k.Node("n2") + ": not a valid record" },
			coordinator.StateConverged, ""},
		{"holders with unknown sessions", func(t *testing.T, e *garbageEnv) { e.put(t, e.k.Slot()+".holders", ghost) },
			"session(s) that hold no slot", func(e *garbageEnv) string { return ".holders lists 1 session(s) that hold no slot" },
			coordinator.StateConverged, ""},
		{"cancel record that is not JSON", func(t *testing.T, e *garbageEnv) {
			e.put(t, e.k.History(e.v2), string(e.v2Hist))
			e.put(t, e.k.Cancel(e.v2), "stop it!")
			e.put(t, e.k.Desired(), `{"sha":"`+e.v2+`","previous":"`+e.v1+`","committed_at":"2026-01-01T00:00:00Z"}`)
		}, "cancel/", func(e *garbageEnv) string { return e.k.Cancel(e.v2) + ": not a valid record" },
			coordinator.StateCancelled, "unreadable cancel record"},
	}
}

// Records written by someone else into a group's tree are logged and
// reported by status, and never make an agent touch its workload.
func TestGarbageInKVIsReportedNotActedOn(t *testing.T) {
	srv := consultest.NewDev(t)
	bin := dockertest.BuildBinary(t, "./cmd/rollagent")
	for i, tc := range garbageCases() {
		t.Run(tc.name, func(t *testing.T) {
			st := coordinator.NewStore(srv.Client(), "")
			rt := &recordingRuntime{}
			e := convergedEnv(t, srv.Client(), st, rt, fmt.Sprintf("garbage%d", i))
			tc.inject(t, e)
			want := map[string][]byte{}
			for _, p := range listTree(t, e) {
				want[p.Key] = p.Value
			}
			rt.Calls()
			a := startAgent(t, st, e.group, "n1", rt, agent.Allow{})
			testkit.Eventually(t, time.Minute, "the agent to log the problem", func() bool {
				return strings.Contains(a.logs.String(), tc.log) && rt.count("Inspect") >= 1
			})
			// A second look proves the first one ended: reconciles run one at a time.
			e.touch(t)
			testkit.Eventually(t, time.Minute, "a second look", func() bool { return rt.count("Inspect") >= 2 })
			waitNode(t, st, e.group, "n1", string(tc.node), func(n *coordinator.NodeState) bool {
				return n.State == tc.node && strings.Contains(n.Error, tc.nodeErr)
			})
			a.stop(t)
			noDestructiveCalls(t, rt.Calls())
			if rt.SHA() != e.v1 {
				t.Fatalf("workload runs %s, want v1 %s", rt.SHA(), e.v1)
			}
			checkGarbageKept(t, e, want)
			statusReports(t, bin, srv.HTTPAddr, e.group, tc.problem(e))
		})
	}
}

// convergedEnv commits v1 to a fresh group, runs an agent for n1 until it
// converged on rt, and stops it; c is the Consul client of st, with which
// the test writes what no Store would.
func convergedEnv(t *testing.T, c *api.Client, st *coordinator.Store, rt *recordingRuntime, name string) *garbageEnv {
	t.Helper()
	group := fleettest.Group(name)
	v1 := commitRecording(t, st, group, "v1", "")
	a := startAgent(t, st, group, "n1", rt, agent.Allow{})
	waitNode(t, st, group, "n1", "converged on v1", func(n *coordinator.NodeState) bool {
		return n.State == coordinator.StateConverged && n.SHA == v1
	})
	a.stop(t)
	v2 := recordingSpec(t, group, "v2", "")
	sha2, _ := v2.SHA()
	canon, _ := v2.Canonical()
	hist, _ := json.Marshal(coordinator.HistoryEntry{SHA: sha2, Spec: canon, CommittedAt: time.Now().UTC()})
	k, _ := st.Keys(group)
	return &garbageEnv{c: c, k: k, group: group, v1: v1, v2: sha2, v2Hist: hist}
}

func listTree(t *testing.T, e *garbageEnv) api.KVPairs {
	t.Helper()
	pairs, _, err := e.c.KV().List(e.k.Root(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return pairs
}

// checkGarbageKept fails if the agent changed or deleted a record it could
// not read, other than its own node record (which it rewrites) and the
// slot's contender keys (its own, transient).
func checkGarbageKept(t *testing.T, e *garbageEnv, before map[string][]byte) {
	t.Helper()
	after := map[string][]byte{}
	for _, p := range listTree(t, e) {
		after[p.Key] = p.Value
	}
	for key, v := range before {
		// The node's own keys: its record, its stop mark's index key (set
		// with the mark as the agent stops) and its place in line.
		if key == e.k.Node("n1") || key == e.k.Stopped("n1") || strings.HasPrefix(key, e.k.Slot()+"c/") {
			continue
		}
		if string(after[key]) != string(v) {
			t.Errorf("%s changed: %q -> %q", key, v, after[key])
		}
	}
}

// statusReports runs `rollagent status` in both formats and wants problem
// among the problems each reports.
func statusReports(t *testing.T, bin, addr, group, problem string) {
	t.Helper()
	text, err := exec.Command(bin, "--consul-addr="+addr, "status", group).CombinedOutput()
	if err != nil {
		t.Fatalf("status: %v\n%s", err, text)
	}
	if !strings.Contains(string(text), "problem: ") || !strings.Contains(string(text), problem) {
		t.Fatalf("status does not report %q:\n%s", problem, text)
	}
	out, err := exec.Command(bin, "--consul-addr="+addr, "status", "-o", "json", group).Output()
	if err != nil {
		t.Fatalf("status -o json: %v\n%s", err, out)
	}
	var s struct {
		Problems []string `json:"problems"`
	}
	if err := json.Unmarshal(out, &s); err != nil {
		t.Fatalf("status -o json is not JSON: %v\n%s", err, out)
	}
	if !strings.Contains(strings.Join(s.Problems, "\n"), problem) {
		t.Fatalf("status -o json problems %q do not report %q", s.Problems, problem)
	}
}

// A holders record someone else wrote, naming sessions that hold no
// holder key or not JSON at all, does not count against K: status reports
// it, a commit still rolls out, and the grant rewrites the record.
func TestBadHoldersRecordDoesNotBlockARollout(t *testing.T) {
	srv := consultest.NewDev(t)
	bin := dockertest.BuildBinary(t, "./cmd/rollagent")
	tests := []struct{ name, record, problem string }{
		{"ghost sessions", `{"holders":{"0b7d6d2e-0000-4000-8000-00000000dead":{"name":"ghost","state":"holding"}}}`,
			".holders lists 1 session(s) that hold no slot"},
		{"not JSON", "{holders", ".holders is not a holders record"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := coordinator.NewStore(srv.Client(), "")
			rt := &recordingRuntime{}
			e := convergedEnv(t, srv.Client(), st, rt, fmt.Sprintf("holders%d", i))
			e.put(t, e.k.Slot()+".holders", tc.record)
			statusReports(t, bin, srv.HTTPAddr, e.group, tc.problem)
			startAgent(t, st, e.group, "n1", rt, agent.Allow{})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			r2, err := st.Commit(ctx, e.group, recordingSpec(t, e.group, "v2", ""), "test", "commit")
			if err != nil {
				t.Fatal(err)
			}
			waitNode(t, st, e.group, "n1", "converged on v2", func(n *coordinator.NodeState) bool {
				return n.State == coordinator.StateConverged && n.SHA == r2.SHA
			})
			if rt.SHA() != r2.SHA {
				t.Fatalf("workload runs %s, want %s", rt.SHA(), r2.SHA)
			}
			gs, err := st.Read(ctx, e.group, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(gs.Problems) != 0 {
				t.Fatalf("problems after the rollout rewrote the record: %q", gs.Problems)
			}
		})
	}
}

// An agent whose own node record someone else overwrote writes it again at
// its next look, even though its state did not change.
func TestOwnNodeRecordIsRewritten(t *testing.T) {
	srv := consultest.NewDev(t)
	st := coordinator.NewStore(srv.Client(), "")
	rt := &recordingRuntime{}
	e := convergedEnv(t, srv.Client(), st, rt, "own")
	rt.Calls()
	a := startAgent(t, st, e.group, "n1", rt, agent.Allow{})
	testkit.Eventually(t, time.Minute, "the agent's first look", func() bool { return rt.count("Inspect") >= 1 })
	e.put(t, e.k.Node("n1"), `{"node":"n1","sha":"`+e.v1[:10])
	e.touch(t)
	waitNode(t, st, e.group, "n1", "converged on v1 again", func(n *coordinator.NodeState) bool {
		return n.State == coordinator.StateConverged && n.SHA == e.v1
	})
	a.stop(t)
	noDestructiveCalls(t, rt.Calls())
}
