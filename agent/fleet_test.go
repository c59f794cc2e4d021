package agent_test

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/client"
	"github.com/hashicorp/go-hclog"
	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/dockertest"
	"github.com/rollagent/rollagent/internal/fleettest"
	"github.com/rollagent/rollagent/internal/fleetwatch"
	"github.com/rollagent/rollagent/internal/testkit"
	"github.com/rollagent/rollagent/internal/testkit/groupkit"
	"github.com/rollagent/rollagent/lockstep"
)

// fleet runs real `rollagent run` processes, one per node, against a real
// Consul and the real Docker engine, so that a test can SIGKILL any of them.
type fleet struct {
	t        *testing.T
	srv      *consultest.Server
	store    *coordinator.Store
	docker   *client.Client
	bin      string
	group    string
	logs     string
	mu       sync.Mutex
	procs    map[string]*exec.Cmd
	releases *fleettest.Releases
	env      []string // added to every agent's environment, e.g. DOCKER_HOST
}

func newFleet(t *testing.T, group string) *fleet {
	t.Helper()
	return newFleetOn(t, group, consultest.NewDev(t), dockertest.Client(t))
}

// newFleetOn is newFleet against a given Consul and Docker engine, for
// tests that stop and restart either.
func newFleetOn(t *testing.T, group string, srv *consultest.Server, cli *client.Client) *fleet {
	t.Helper()
	f := newInProcFleetOn(t, group, srv, cli)
	f.bin = dockertest.BuildBinary(t, "./cmd/rollagent")
	return f
}

// newInProcFleetOn is newFleetOn without the agent binary, for agents run
// in this process on agent.NewDocker.
func newInProcFleetOn(t *testing.T, group string, srv *consultest.Server, cli *client.Client) *fleet {
	t.Helper()
	dockertest.Cleanup(t, cli)
	f := &fleet{t: t, srv: srv, store: coordinator.NewStore(srv.Client(), ""), docker: cli,
		group: fleettest.Group(group), logs: t.TempDir(), procs: map[string]*exec.Cmd{}}
	f.releases = fleettest.NewReleases(t, cli, "rollagent-test/demoapp")
	t.Cleanup(f.stopAll)
	return f
}

// startDockerAgent runs node's agent in this process on a real Docker
// runtime whose containers carry the test run's label.
func startDockerAgent(t *testing.T, f *fleet, st *coordinator.Store, node string) *inProcAgent {
	t.Helper()
	rt := agent.NewDocker(f.docker, f.group, node, dockertest.Labels(), hclog.NewNullLogger())
	return startAgent(t, st, f.group, node, rt, agent.Allow{})
}

// image builds a demoapp release once per fleet.
func (f *fleet) image(release string, env map[string]string) string {
	return f.releases.Image(release, env)
}

// spec is a fast-rolling spec for image.
func (f *fleet) spec(image string, parallel int, action string, maxFailures int) *hashspec.Spec {
	return fleettest.Spec(f.t, fleettest.SpecOptions{Group: f.group, Image: image, MaxParallel: parallel,
		FailureAction: action, MaxFailures: maxFailures, HealthyDeadline: 20 * time.Second})
}

func (f *fleet) commit(s *hashspec.Spec) string {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := f.store.Commit(ctx, f.group, s, "test", "commit")
	if err != nil {
		f.t.Fatal(err)
	}
	return res.SHA
}

func (f *fleet) start(node string) {
	f.t.Helper()
	logf, err := os.OpenFile(filepath.Join(f.logs, node+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		f.t.Fatal(err)
	}
	cmd := exec.Command(f.bin, "--consul-addr="+f.srv.HTTPAddr, "--log-level=debug", "run", "--group="+f.group,
		"--node="+node, "--label="+dockertest.Label+"="+dockertest.RunID())
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); logf.Close() }()
	f.mu.Lock()
	f.procs[node] = cmd
	f.mu.Unlock()
}

func (f *fleet) signal(node string, sig syscall.Signal) {
	f.mu.Lock()
	cmd := f.procs[node]
	delete(f.procs, node)
	f.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Signal(sig)
	}
}

func (f *fleet) stopAll() {
	f.mu.Lock()
	nodes := make([]string, 0, len(f.procs))
	for n := range f.procs {
		nodes = append(nodes, n)
	}
	f.mu.Unlock()
	for _, n := range nodes {
		f.signal(n, syscall.SIGKILL)
	}
	if f.t.Failed() {
		for _, n := range nodes {
			b, _ := os.ReadFile(filepath.Join(f.logs, n+".log"))
			lines := strings.Split(string(b), "\n")
			if len(lines) > 40 {
				lines = lines[len(lines)-40:]
			}
			f.t.Logf("agent %s log tail:\n%s", n, strings.Join(lines, "\n"))
		}
	}
}

// steady watches for d that the fleet's containers stay before, failing
// the test with what changed when: a bounded watch for movement.
func (f *fleet) steady(d time.Duration, when string, before []string) {
	f.t.Helper()
	testkit.Steady(f.t, d, 250*time.Millisecond, func() error {
		if got := f.containerIDs(); !reflect.DeepEqual(got, before) {
			return fmt.Errorf("containers changed %s: %v -> %v", when, before, got)
		}
		return nil
	})
}

// keys names the keys of the fleet's group.
func (f *fleet) keys() coordinator.Keys { return groupkit.Keys(f.t, f.group) }

// holders reads the group's slot, failing the test when it cannot.
func (f *fleet) holders() *lockstep.Holders {
	f.t.Helper()
	h, err := groupkit.Holders(f.srv.Client(), f.keys())
	if err != nil {
		f.t.Fatal(err)
	}
	return h
}

// state reads the group.
func (f *fleet) state() *coordinator.GroupState {
	return readGroup(f.t, f.store, f.group)
}

type workload = fleettest.Workload

func (f *fleet) workloads() map[string]workload { return fleettest.Workloads(f.t, f.docker, f.group) }

// waitFor polls cond for at most d.
func (f *fleet) waitFor(d time.Duration, what string, cond func() bool) {
	f.t.Helper()
	testkit.Eventually(f.t, d, what, cond)
}

// running says every node runs exactly one container, healthy, of sha.
func (f *fleet) running(nodes []string, sha string) bool {
	return fleettest.Running(f.workloads(), nodes, sha)
}

// converged says every node runs sha and its agent reports it converged.
func (f *fleet) converged(nodes []string, sha string) bool {
	if !f.running(nodes, sha) {
		return false
	}
	gs := f.state()
	done := 0
	for _, ns := range gs.Nodes {
		if ns.SHA == sha && ns.State == coordinator.StateConverged {
			done++
		}
	}
	return done == len(nodes)
}

// watch starts the fleet invariant monitor over nodes of the fleet's
// group, every 100ms unless o says otherwise: Docker's own state when the
// fleet has a Docker engine, and what o adds. A test that fails early
// leaves no monitor behind.
func (f *fleet) watch(nodes []string, o fleetwatch.Options) *fleetwatch.Monitor {
	o.Groups = map[string][]string{f.group: nodes}
	if f.docker != nil {
		o.Probe = fleetwatch.Docker(f.docker)
	}
	o.Every = cmp.Or(o.Every, 100*time.Millisecond)
	m := fleetwatch.Start(o)
	f.t.Cleanup(m.Stop)
	return m
}

// sample watches how many of nodes are down (no healthy container under
// the managed name): its Require(t, fleetwatch.AtMost(K)) is the
// guarantee.
func (f *fleet) sample(nodes []string) *fleetwatch.Monitor {
	return f.watch(nodes, fleetwatch.Options{})
}

func nodes(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("n%d", i+1)
	}
	return out
}
