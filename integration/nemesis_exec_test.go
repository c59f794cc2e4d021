package integration

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/dockertest"
	"github.com/rollagent/rollagent/internal/fleettest"
	"github.com/rollagent/rollagent/internal/forkhook"
)

// The nemesis' third group runs the exec runtime with hooks that fork
// (internal/forkhook): one container per host, FROM scratch, whose first
// process is the host's init; the agent and the workload are its children,
// the hooks the agent's, each hook's install a child of the hook.
var (
	hookNodes = []string{"h1", "h2", "h3"}
	hks       = fleettest.Group("hooks")
)

const (
	kHooks = 1
	// execHookTimeout is the agents' --hook-timeout: a slow commit draws
	// installs on both sides of it, so some overrun and are killed.
	execHookTimeout = 20 * time.Second
	// execCheckTimeout bounds the checker's wait for a workload's answer.
	execCheckTimeout = 2 * time.Second
	// Install times the commits draw, per node (forkhook.Delay), in ms.
	installGood = "500-8000"
	installSlow = "12000-28000"
	installFail = "200-3000"
)

// nemesisGroups are the groups the nemesis runs.
func nemesisGroups() []string { return []string{mgrs, wkrs, hks} }

func (c *cluster) isExec(node string) bool { return c.nodes[node] == hks }

// hooksUp adds the hooks group's nodes, once per cluster, and has them
// converge on a first release.
func (c *cluster) hooksUp() {
	c.t.Helper()
	if _, ok := c.nodes[hookNodes[0]]; ok {
		return
	}
	files := map[string]string{"/rollagent": dockertest.BuildBinary(c.t, "./cmd/rollagent"),
		"/forkhook": dockertest.BuildBinary(c.t, "./internal/forkhook/cmd/forkhook")}
	tag := fmt.Sprintf("rollagent-it/exec-host:%s", dockertest.RunID()[:8])
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := dockertest.ImageFromBinaries(ctx, c.docker, tag, files, "", dockertest.Labels()); err != nil {
		c.t.Fatalf("build %s: %v", tag, err)
	}
	c.built = append(c.built, tag)
	for _, nd := range hookNodes {
		c.addExecNode(nd, tag)
	}
	spec := fleettest.Spec(c.t, fleettest.SpecOptions{Group: hks, Image: "rollagent-it/forkhook:v1", MaxParallel: kHooks,
		FailureAction: "pause", MaxFailures: 1, HealthyDeadline: testHealthyDeadline, Env: map[string]string{forkhook.EnvInstall: installGood}})
	res, err := c.store().Commit(ctx, hks, spec, testAuthor, "commit")
	if err != nil {
		c.t.Fatal(err)
	}
	c.waitFor(3*time.Minute, "the hooks group to converge", func() bool { return c.execConverged(res.SHA) })
}

// addExecNode starts a Consul client for node and its host, which boots
// the agent in the client's network namespace.
func (c *cluster) addExecNode(node, image string) {
	c.t.Helper()
	cmd := append([]string{"agent", "-node=" + node, "-data-dir=/data", "-bind={{ GetInterfaceIP \"eth0\" }}",
		"-client=127.0.0.1", "-dns-port=-1", "-grpc-port=-1"}, c.joinArgs()...)
	c.run(c.clientName(node), &container.Config{Image: c.consul, Cmd: cmd, Labels: dockertest.Labels()}, &container.HostConfig{}, true)
	c.waitNodeHealthy(node)
	agentArgv := []string{"/rollagent", "--consul-addr=127.0.0.1:8500", "--log-level=debug", "run", "--group=" + hks,
		"--node=" + node, "--runtime=exec", "--replace-cmd=/forkhook", "--replace-cmd=replace", "--health-cmd=/forkhook",
		"--health-cmd=health", "--state-dir=" + forkhook.StateDir, "--hook-timeout=" + execHookTimeout.String()}
	host := &container.HostConfig{NetworkMode: container.NetworkMode("container:" + c.clientName(node))}
	c.run(c.agentName(node), &container.Config{Image: image, Entrypoint: []string{"/forkhook", "init", "--"}, Cmd: agentArgv,
		Labels: dockertest.Labels()}, host, false)
	c.nodes[node] = hks
}

// proc is a process of the Docker host, as /proc shows it.
type proc struct {
	pid, ppid int
	argv      []string
}

// hostProcs lists the processes of node's host container, with the host
// pid of its init: the tests share the Docker host's pid namespace.
func (c *cluster) hostProcs(node string) ([]proc, int, error) {
	ctx, cancel := c.ctx()
	defer cancel()
	insp, err := c.docker.ContainerInspect(ctx, c.agentName(node))
	if err != nil || insp.State == nil || !insp.State.Running {
		return nil, 0, fmt.Errorf("host %s does not run: %v", node, err)
	}
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, 0, err
	}
	parent := map[int]int{}
	var all []proc
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err1 := os.ReadFile(filepath.Join("/proc", d.Name(), "stat"))
		cmd, err2 := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		i := strings.LastIndexByte(string(b), ')')
		if err1 != nil || err2 != nil || i < 0 {
			continue // gone since the listing
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		parent[pid] = ppid
		all = append(all, proc{pid: pid, ppid: ppid, argv: strings.Split(strings.TrimRight(string(cmd), "\x00"), "\x00")})
	}
	var mine []proc
	for _, p := range all {
		if descends(parent, p.pid, insp.State.Pid) {
			mine = append(mine, p)
		}
	}
	return mine, insp.State.Pid, nil
}

// descends says pid is a descendant of root by parent.
func descends(parent map[int]int, pid, root int) bool {
	for i := 0; i < 64 && pid > 1; i++ { // bounded: process trees are shallow
		if pid = parent[pid]; pid == root {
			return true
		}
	}
	return false
}

// child finds the child of init whose argv ends with cmd.
func child(procs []proc, init int, cmd string) int {
	for _, p := range procs {
		if p.ppid == init && p.argv[len(p.argv)-1] == cmd {
			return p.pid
		}
	}
	return 0
}

// agentPid is the host pid of node's agent, 0 if it does not run.
func (c *cluster) execAgent(node string) ([]proc, int, error) {
	procs, init, err := c.hostProcs(node)
	if err != nil {
		return nil, 0, err
	}
	for _, p := range procs {
		if p.ppid == init && p.argv[0] == "/rollagent" {
			return procs, p.pid, nil
		}
	}
	return procs, 0, nil
}

var signals = map[string]syscall.Signal{"KILL": syscall.SIGKILL, "TERM": syscall.SIGTERM, "STOP": syscall.SIGSTOP, "CONT": syscall.SIGCONT}

// agentSignalErr sends sig to node's agent. On an exec host a TERM goes to
// every process of the agent's unit, its hooks too, as systemd's
// KillMode=control-group does: a hook that dies of it as its agent stops
// is a step cut off, undone with no failure (issue 25, item 6). A KILL
// goes to the agent alone, and leaves its hooks running.
func (c *cluster) agentSignalErr(node, sig string) error {
	if !c.isExec(node) {
		if sig == "KILL" {
			return c.killErr(c.agentName(node))
		}
		return c.signalErr(c.agentName(node), sig)
	}
	procs, agent, err := c.execAgent(node)
	if err != nil || agent == 0 {
		return fmt.Errorf("signal %s to %s's agent: not running: %v", sig, node, err)
	}
	if err := syscall.Kill(agent, signals[sig]); err != nil {
		return fmt.Errorf("signal %s to %s's agent: %w", sig, node, err)
	}
	if sig != "TERM" {
		return nil
	}
	parent := map[int]int{}
	for _, p := range procs {
		parent[p.pid] = p.ppid
	}
	for _, p := range procs {
		if descends(parent, p.pid, agent) {
			_ = syscall.Kill(p.pid, syscall.SIGTERM) // it may have exited meanwhile
		}
	}
	return nil
}

// agentPauseErr freezes node's agent (only the agent: on an exec host its
// hooks and the workload run on), or thaws it.
func (c *cluster) agentPauseErr(node string, pause bool) error {
	switch {
	case !c.isExec(node) && pause:
		return c.pauseErr(c.agentName(node))
	case !c.isExec(node):
		return c.unpauseErr(c.agentName(node))
	case pause:
		return c.agentSignalErr(node, "STOP")
	}
	return c.agentSignalErr(node, "CONT")
}

// agentStartErr starts node's agent: on an exec host its init does, or
// the host's boot if the host is down.
func (c *cluster) agentStartErr(node string) error {
	if !c.isExec(node) {
		return c.startDockerAgent(c.agentName(node))
	}
	ctx, cancel := c.ctx()
	defer cancel()
	insp, err := c.docker.ContainerInspect(ctx, c.agentName(node))
	if err == nil && insp.State != nil && !insp.State.Running {
		return c.startErr(c.agentName(node))
	}
	return c.signalErr(c.agentName(node), "USR1")
}

// queuedStartBound bounds how long a start asked for while an agent still
// stops waits for the stop to end.
const queuedStartBound = 5 * time.Minute

// startDocker starts a Docker host's agent container as systemd starts a
// unit: a start asked for while a stop is under way (a SIGTERM lets the
// agent finish its step first) is queued, and runs once the stop ended.
// A start of the container while it still runs would do nothing, and the
// agent, once out, would stay down for the rest of the run.
func (c *cluster) startDockerAgent(name string) error {
	ctx, cancel := c.ctx()
	insp, err := c.docker.ContainerInspect(ctx, name)
	cancel()
	if err != nil || insp.State == nil || !insp.State.Running {
		return c.startErr(name)
	}
	go func() {
		if c.waitExited(name, queuedStartBound) {
			_ = c.startErr(name) // the run may have ended meanwhile
		}
	}()
	return nil
}

// agentExited waits at most d for node's agent to stop running.
func (c *cluster) agentExited(node string, d time.Duration) bool {
	if !c.isExec(node) {
		return c.waitExited(c.agentName(node), d)
	}
	return fleettest.Poll(d, func() bool {
		_, agent, err := c.execAgent(node)
		return err != nil || agent == 0
	})
}

// hostOffErr takes an exec host down with everything on it: its init,
// the agent if it runs, the hooks, the workload.
func (c *cluster) hostOffErr(node string) error {
	ctx, cancel := c.ctx()
	defer cancel()
	insp, err := c.docker.ContainerInspect(ctx, c.agentName(node))
	if err != nil || insp.State == nil || !insp.State.Running {
		return err
	}
	return c.killErr(c.agentName(node))
}

// execWorkloadPid is the host pid of node's workload.
func (c *cluster) execWorkloadPid(node string) (int, error) {
	procs, init, err := c.hostProcs(node)
	if err != nil {
		return 0, err
	}
	if pid := child(procs, init, "serve"); pid != 0 {
		return pid, nil
	}
	return 0, fmt.Errorf("%s's workload does not run", node)
}

// execWorkload stands one exec host's install for a container: its ID
// names the install (execID), Healthy is forkhook.Check's verdict.
func (c *cluster) execWorkload(node string) workload {
	ctx, cancel := c.ctx()
	defer cancel()
	insp, err := c.docker.ContainerInspect(ctx, c.agentName(node))
	running := err == nil && insp.State != nil && insp.State.Running
	var in forkhook.Installed
	status := "host down"
	if running {
		in, err = forkhook.Check(fmt.Sprintf("/proc/%d/root", insp.State.Pid), "", execCheckTimeout)
		status = "healthy"
		if err != nil {
			status = err.Error()
		}
	}
	if in.SHA == "" && !errors.Is(err, forkhook.ErrNotInstalled) {
		in, err = c.installedOffline(node) // a host down, or gone down since the inspect
		if err != nil && !errors.Is(err, forkhook.ErrNotInstalled) {
			status += "; " + err.Error()
		}
		running = false
	}
	healthy := running && status == "healthy"
	w := workload{Healthy: healthy, Serving: healthy}
	if in.SHA != "" {
		id := execID(node, in)
		w.SHAs, w.IDs, w.Managed = []string{in.SHA}, []string{id}, id
		if w.Healthy {
			w.Running = []string{id}
		}
	}
	w.Status = []string{fmt.Sprintf("installed %s: %s", coordinator.ShortSHA(in.SHA), status)}
	return w
}

// installedOffline reads a host's installed-version file through Docker,
// which reads a stopped container's too.
func (c *cluster) installedOffline(node string) (forkhook.Installed, error) {
	ctx, cancel := c.ctx()
	defer cancel()
	rc, _, err := c.docker.CopyFromContainer(ctx, c.agentName(node), forkhook.InstalledFile)
	if cerrdefs.IsNotFound(err) {
		return forkhook.Installed{}, forkhook.ErrNotInstalled
	}
	if err != nil {
		return forkhook.Installed{}, err
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	if _, err := tr.Next(); err != nil {
		return forkhook.Installed{}, err
	}
	b, err := io.ReadAll(io.LimitReader(tr, 1<<16))
	if err != nil {
		return forkhook.Installed{}, err
	}
	return forkhook.DecodeInstalled(b)
}

// execID names an install as the checker's invariants name a container;
// its last field is when the hook that installed it started, which
// invariant (b) judges as a container's Created time (execCreated).
func execID(node string, in forkhook.Installed) string {
	return fmt.Sprintf("exec-%s-%.12s-%d-%d", node, in.SHA, unixNano(in.Started), unixNano(in.Landed))
}

// unixNano is t's, 0 for the zero time (whose own is out of range).
func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func execCreated(id string) (time.Time, bool) { return execTime(id, 2) }

// execLanded is when the install of id landed (forkhook.Installed.Landed).
func execLanded(id string) (time.Time, bool) { return execTime(id, 1) }

// execTime reads the time in the field of id that is back from its end.
func execTime(id string, back int) (time.Time, bool) {
	f := strings.Split(id, "-")
	if !strings.HasPrefix(id, "exec-") || len(f) < 2+back {
		return time.Time{}, false
	}
	ns, err := strconv.ParseInt(f[len(f)-back], 10, 64)
	if err != nil || ns == 0 {
		return time.Time{}, false
	}
	return time.Unix(0, ns), true
}

// execConverged says every exec host runs sha healthy, and its record
// says converged on it.
func (c *cluster) execConverged(sha string) bool {
	ws, err := c.listWorkloads(hks)
	if err != nil {
		return false
	}
	for _, w := range ws {
		if !w.Healthy || len(w.SHAs) != 1 || w.SHAs[0] != sha {
			return false
		}
	}
	done := 0
	for _, n := range c.state(hks).Nodes {
		if n.SHA == sha && n.State == coordinator.StateConverged {
			done++
		}
	}
	return done == len(hookNodes)
}
