package ui

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"
	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/consultest"
)

// hookBound caps the replace hook's wait on the hold file, so that a hook
// orphaned by a killed test binary still ends.
const hookBound = 6000 // tenths of a second: 10 minutes, the hook timeout

// fleet is three in-process agents of one group on a Consul dev agent, with
// the exec runtime: each node's "workload" is the spec file its replace hook
// copied. While the hold file exists, a replace hook takes the workload
// down and then blocks, so the slot holder stays mid-replacement (and
// unhealthy) and the other nodes wait: a rollout frozen half-way.
type fleet struct {
	t       *testing.T
	srv     *consultest.Server
	store   *coordinator.Store
	group   string
	nodes   []string
	dir     string
	hold    string
	logPath string
}

// newFleet starts the agents; they stop when the test ends, after the hold
// is lifted so that a blocked hook can finish.
func newFleet(t *testing.T, group string, nodes ...string) *fleet {
	t.Helper()
	srv := consultest.NewDev(t)
	dir := t.TempDir()
	f := &fleet{t: t, srv: srv, store: coordinator.NewStore(srv.Client(), ""), group: group, nodes: nodes,
		dir: dir, hold: filepath.Join(dir, "hold"), logPath: filepath.Join(dir, "agents.log")}
	logf, err := os.Create(f.logPath)
	if err != nil {
		t.Fatal(err)
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "agent", Level: hclog.Debug, Output: logf})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan string, len(nodes))
	for _, n := range nodes {
		// A session TTL well above the default: Chromium starting beside
		// other tests must not make a holder's session lapse mid-test.
		a, err := agent.New(agent.Config{Group: group, Node: n, Store: f.store, Runtime: f.runtime(n, log), Logger: log,
			SessionTTL: 15 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = a.Run(ctx); done <- n }()
	}
	t.Cleanup(func() {
		f.release()
		cancel()
		f.waitStopped(done)
		logf.Close()
		if t.Failed() {
			f.dumpLog()
		}
	})
	return f
}

func (f *fleet) runtime(node string, log hclog.Logger) *agent.Exec {
	d := shellQuote(filepath.Join(f.dir, node))
	replace := fmt.Sprintf(`d=%s; mkdir -p "$d" && rm -f "$d/installed.json" && i=0 &&
		while [ -e %s ] && [ "$i" -lt %d ]; do sleep 0.1; i=$((i+1)); done &&
		cp "$ROLLAGENT_SPEC" "$d/installed.json"`, d, shellQuote(f.hold), hookBound)
	state := filepath.Join(f.dir, node+"-state")
	if err := os.MkdirAll(state, 0o700); err != nil {
		f.t.Fatal(err)
	}
	return &agent.Exec{ReplaceCmd: []string{"sh", "-c", replace}, HealthCmd: []string{"test", "-f", filepath.Join(f.dir, node, "installed.json")},
		StateDir: state, Group: f.group, Node: node, Log: log.Named(node)}
}

// shellQuote quotes s as one sh word.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// waitStopped waits, bounded, for every agent's Run to return.
func (f *fleet) waitStopped(done <-chan string) {
	deadline := time.After(3 * time.Minute)
	for range f.nodes {
		select {
		case <-done:
		case <-deadline:
			f.t.Errorf("agents still running 3 minutes after they were stopped")
			return
		}
	}
}

func (f *fleet) dumpLog() {
	b, _ := os.ReadFile(f.logPath)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	f.t.Logf("agent log tail:\n%s", strings.Join(lines[max(0, len(lines)-60):], "\n"))
}

// holdReplacements makes the next replace hook block with its workload down.
func (f *fleet) holdReplacements() {
	f.t.Helper()
	if err := os.WriteFile(f.hold, nil, 0o600); err != nil {
		f.t.Fatal(err)
	}
}

// release lets a blocked replace hook finish.
func (f *fleet) release() {
	if err := os.Remove(f.hold); err != nil && !os.IsNotExist(err) {
		f.t.Errorf("lifting the hold: %v", err)
	}
}

// commit commits a spec of release and returns its SHA.
func (f *fleet) commit(release string) string {
	f.t.Helper()
	js := fmt.Sprintf(`{"name":%q,"container":{"image":"rollagent-demo/web:%s","env":{"MODE":"prod"}},
		"update":{"max_parallel":1,"min_healthy_time":"1s","healthy_deadline":"10m","failure_action":"pause","max_failures":1}}`,
		f.group, release)
	spec, _, err := hashspec.Load([]byte(js), hashspec.FormatJSON, "spec "+release)
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := f.store.Commit(ctx, f.group, spec, "ui-test", "release "+release)
	if err != nil {
		f.t.Fatalf("commit %s: %v", release, err)
	}
	return res.SHA
}

// nodeStates reads the nodes' published states from KV, by node.
func (f *fleet) nodeStates() map[string]coordinator.NodeState {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	gs, err := f.store.Read(ctx, f.group, nil)
	if err != nil {
		return nil
	}
	out := map[string]coordinator.NodeState{}
	for _, n := range gs.Nodes {
		out[n.Node] = n
	}
	return out
}

// converged says every node reports sha installed and converged.
func (f *fleet) converged(sha string) bool {
	states := f.nodeStates()
	for _, n := range f.nodes {
		if s := states[n]; s.SHA != sha || s.Desired != sha || s.State != coordinator.StateConverged {
			return false
		}
	}
	return true
}

// midRollout returns the one node replacing from -> to while every other
// node waits on from, as KV has it, or "".
func (f *fleet) midRollout(from, to string) string {
	holder := ""
	states := f.nodeStates()
	for _, n := range f.nodes {
		s := states[n]
		if s.SHA != from || s.Desired != to {
			return ""
		}
		switch {
		case s.State == coordinator.StateReplacing && holder == "":
			holder = n
		case s.State != coordinator.StateWaiting:
			return ""
		}
	}
	return holder
}

// serviceProblem says how the Consul service rollagent-<group> differs from
// KV's node states, or "": one instance per node whose tags and meta carry
// its SHA, desired SHA and state, and whose workload check is critical on
// the holder (its workload is down) and passing elsewhere.
func (f *fleet) serviceProblem(holder string) string {
	states := f.nodeStates()
	entries, _, err := f.srv.Client().Health().Service("rollagent-"+f.group, "", false, nil)
	if err != nil {
		return err.Error()
	}
	if len(entries) != len(f.nodes) {
		return fmt.Sprintf("%d instances, want %d", len(entries), len(f.nodes))
	}
	for _, e := range entries {
		s := e.Service
		n := s.Meta["node"]
		st, ok := states[n]
		if !ok {
			return fmt.Sprintf("instance %s: node %q has no state in KV", s.ID, n)
		}
		tags := []string{"sha:" + coordinator.ShortSHA(st.SHA), "state:" + string(st.State), "desired:" + coordinator.ShortSHA(st.Desired)}
		for _, tag := range tags {
			if !slices.Contains(s.Tags, tag) {
				return fmt.Sprintf("instance %s: tags %q lack %q", s.ID, s.Tags, tag)
			}
		}
		if s.Meta["sha"] != st.SHA || s.Meta["desired"] != st.Desired || s.Meta["state"] != string(st.State) {
			return fmt.Sprintf("instance %s: meta %v, KV has %+v", s.ID, s.Meta, st)
		}
		want := api.HealthPassing
		if n == holder {
			want = api.HealthCritical
		}
		if got := workloadCheck(e); got != want {
			return fmt.Sprintf("instance %s: workload check %s, want %s", s.ID, got, want)
		}
	}
	return ""
}

func workloadCheck(e *api.ServiceEntry) string {
	for _, c := range e.Checks {
		if c.CheckID == e.Service.ID+":workload" {
			return c.Status
		}
	}
	return "missing"
}

// eventually polls problem every 250ms for at most d until it returns "",
// and fails the test with the last problem seen otherwise.
func eventually(t *testing.T, d time.Duration, what string, problem func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		p := problem()
		if p == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s: %s", d, what, p)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func (f *fleet) keys() coordinator.Keys {
	k, err := f.store.Keys(f.group)
	if err != nil {
		f.t.Fatal(err)
	}
	return k
}
