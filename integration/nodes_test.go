package integration

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/pkg/stdcopy"
	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/internal/dockertest"
	"github.com/rollagent/rollagent/internal/fleettest"
)

func (c *cluster) clientName(node string) string { return c.prefix + "-" + node }
func (c *cluster) agentName(node string) string  { return c.prefix + "-" + node + "-agent" }

// addNode starts a Consul client agent for node, waits until the servers
// see it, then starts rollagent in its network namespace.
func (c *cluster) addNode(node, group string) {
	c.t.Helper()
	cmd := append([]string{"agent", "-node=" + node, "-data-dir=/data", "-bind={{ GetInterfaceIP \"eth0\" }}",
		"-client=127.0.0.1", "-dns-port=-1", "-grpc-port=-1"}, c.joinArgs()...)
	c.run(c.clientName(node), &container.Config{Image: c.consul, Cmd: cmd, Labels: dockertest.Labels()}, &container.HostConfig{}, true)
	c.waitNodeHealthy(node)
	c.runAgent(node, group, nil)
	c.nodes[node] = group
}

// runAgent starts rollagent for node in its Consul client's network
// namespace, with env (the nemesis gives each a clock skew).
func (c *cluster) runAgent(node, group string, env []string) {
	c.t.Helper()
	agentCmd := []string{"--consul-addr=127.0.0.1:8500", "--log-level=debug", "run", "--group=" + group, "--node=" + node,
		"--label=" + dockertest.Label + "=" + dockertest.RunID()}
	host := &container.HostConfig{NetworkMode: container.NetworkMode("container:" + c.clientName(node)),
		Binds: []string{"/var/run/docker.sock:/var/run/docker.sock"}}
	c.run(c.agentName(node), &container.Config{Image: c.agent, Cmd: agentCmd, Env: env, Labels: dockertest.Labels()}, host, false)
}

func (c *cluster) waitNodeHealthy(node string) {
	c.t.Helper()
	c.waitFor(90*time.Second, "node "+node+" to join", func() bool { return c.nodeJoined(node) })
}

// nodeJoined says the servers see node's Consul agent alive.
func (c *cluster) nodeJoined(node string) bool {
	checks, _, err := c.api().Health().Node(node, nil)
	if err != nil {
		return false
	}
	for _, ch := range checks {
		if ch.CheckID == "serfHealth" && ch.Status == api.HealthPassing {
			return true
		}
	}
	return false
}

func (c *cluster) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), time.Minute)
}

// kill SIGKILLs containers, as a crash would.
func (c *cluster) kill(names ...string) {
	c.t.Helper()
	if err := c.killErr(names...); err != nil {
		c.t.Fatal(err)
	}
}

// killErr is kill for the nemesis, which must heal what it broke before it
// fails: it returns the first error and still kills the rest.
func (c *cluster) killErr(names ...string) error {
	return c.each("kill", names, func(ctx context.Context, n string) error { return c.docker.ContainerKill(ctx, n, "KILL") })
}

// each does op to every container of names, and returns the first error
// (named by verb) after trying them all.
func (c *cluster) each(verb string, names []string, op func(ctx context.Context, name string) error) error {
	ctx, cancel := c.ctx()
	defer cancel()
	var first error
	for _, n := range names {
		if err := op(ctx, n); err != nil && first == nil {
			first = fmt.Errorf("%s %s: %w", verb, n, err)
		}
	}
	return first
}

// start starts stopped containers again, with their data.
func (c *cluster) start(names ...string) {
	c.t.Helper()
	if err := c.startErr(names...); err != nil {
		c.t.Fatal(err)
	}
}

func (c *cluster) startErr(names ...string) error {
	return c.each("start", names, func(ctx context.Context, n string) error {
		return c.docker.ContainerStart(ctx, n, container.StartOptions{})
	})
}

// killNode kills a whole node, as a host that loses power: its Consul
// client, its agent and the workload containers that run on it. A SIGKILL
// through Docker keeps a container with restart policy unless-stopped down
// for good, so reviveNode starts them again as the host's Docker would when
// it boots.
func (c *cluster) killNode(node string) {
	c.t.Helper()
	if err := c.killNodeErr(node); err != nil {
		c.t.Fatal(err)
	}
}

func (c *cluster) killNodeErr(node string) error {
	if err := c.killErr(c.agentName(node), c.clientName(node)); err != nil {
		return err
	}
	return c.workloadsDown(node)
}

// hostDownErr takes node's host down, its agent already stopped: its
// Consul client leaves the cluster on SIGTERM as a client does at
// shutdown (a SIGKILL after 15s if it has not exited), then its
// workloads go down with the host.
func (c *cluster) hostDownErr(node string, graceful bool) error {
	if graceful {
		if err := c.signalErr(c.clientName(node), "TERM"); err != nil {
			return err
		}
		if c.waitExited(c.clientName(node), 15*time.Second) {
			return c.workloadsDown(node)
		}
	}
	if err := c.killErr(c.agentName(node), c.clientName(node)); err != nil {
		return err
	}
	return c.workloadsDown(node)
}

// workloadsDown kills the workloads of a node whose host went down, and
// notes the ones its boot starts again.
func (c *cluster) workloadsDown(node string) error {
	if c.isExec(node) {
		return c.hostOffErr(node)
	}
	ws, err := fleettest.ListWorkloads(c.docker, c.nodes[node])
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.booted[node] = ws[node].Running
	c.mu.Unlock()
	if err := c.killErr(ws[node].Running...); err != nil {
		return err
	}
	// A start the agent asked for just before it died still completes in
	// the daemon, which a host without power would not do: kill what
	// starts for a while. Boot starts only what ran at the first look.
	for i := 0; i < 10; i++ {
		time.Sleep(300 * time.Millisecond)
		ws, err := fleettest.ListWorkloads(c.docker, c.nodes[node])
		if err != nil {
			return err
		}
		if len(ws[node].Running) > 0 {
			c.t.Logf("killing %s's workload again: %q started after its agent died", node, ws[node].Status)
			_ = c.killErr(ws[node].Running...) // it may exit by itself meanwhile
		}
	}
	return nil
}

// signalErr sends sig to a container's main process through Docker.
func (c *cluster) signalErr(name, sig string) error {
	ctx, cancel := c.ctx()
	defer cancel()
	if err := c.docker.ContainerKill(ctx, name, sig); err != nil {
		return fmt.Errorf("signal %s %s: %w", sig, name, err)
	}
	return nil
}

// waitExited waits at most d for a container to stop running.
func (c *cluster) waitExited(name string, d time.Duration) bool {
	return fleettest.Poll(d, func() bool {
		ctx, cancel := c.ctx()
		defer cancel()
		insp, err := c.docker.ContainerInspect(ctx, name)
		return err == nil && insp.State != nil && !insp.State.Running
	})
}

// pauseErr freezes every process of a container (the cgroup freezer), as
// SIGSTOP or a frozen VM would; unpauseErr thaws them.
func (c *cluster) pauseErr(name string) error {
	ctx, cancel := c.ctx()
	defer cancel()
	if err := c.docker.ContainerPause(ctx, name); err != nil {
		return fmt.Errorf("pause %s: %w", name, err)
	}
	return nil
}

func (c *cluster) unpauseErr(name string) error {
	ctx, cancel := c.ctx()
	defer cancel()
	if err := c.docker.ContainerUnpause(ctx, name); err != nil {
		return fmt.Errorf("unpause %s: %w", name, err)
	}
	return nil
}

// workloadPid is the host pid of the process of node's managed workload
// container (the tests share the Docker host's pid namespace).
func (c *cluster) workloadPid(node string) (int, error) {
	if c.isExec(node) {
		return c.execWorkloadPid(node)
	}
	ws, err := fleettest.ListWorkloads(c.docker, c.nodes[node])
	if err != nil {
		return 0, err
	}
	w := ws[node]
	if w.Managed == "" {
		return 0, fmt.Errorf("%s has no managed workload: %q", node, w.Status)
	}
	ctx, cancel := c.ctx()
	defer cancel()
	insp, err := c.docker.ContainerInspect(ctx, w.Managed)
	if err != nil || insp.State == nil || !insp.State.Running {
		return 0, fmt.Errorf("%s's workload does not run: %v", node, err)
	}
	return insp.State.Pid, nil
}

// created is when Docker created a container, by its own clock (the
// host's, which the tests share).
func (c *cluster) created(id string) (time.Time, error) {
	if at, ok := execCreated(id); ok {
		return at, nil // an exec host's install: when its hook started
	}
	ctx, cancel := c.ctx()
	defer cancel()
	insp, err := c.docker.ContainerInspect(ctx, id)
	if err != nil {
		return time.Time{}, err
	}
	return time.Parse(time.RFC3339Nano, insp.Created)
}

// reviveNode boots a killed node again and waits until it has rejoined.
func (c *cluster) reviveNode(node string) {
	c.t.Helper()
	if err := c.reviveNodeErr(node, true); err != nil {
		c.t.Fatal(err)
	}
}

// reviveNodeErr boots the node as a host would: Docker starts the workload
// containers that ran when it died, then the Consul client and the agent
// start. A workload the agent removed meanwhile is none of the boot's
// business. With rejoin, the agent starts only once the servers see the
// client again, so that a scenario's timing does not depend on the
// agent's Consul retries; without, everything starts at once, as a host's
// services do, and a cluster that lost its leader does not hold the boot
// up.
func (c *cluster) reviveNodeErr(node string, rejoin bool) error {
	c.mu.Lock()
	boot := c.booted[node]
	delete(c.booted, node)
	c.mu.Unlock()
	for _, id := range boot {
		if err := c.startErr(id); err != nil {
			c.t.Logf("boot of %s: %v", node, err)
		}
	}
	if err := c.startErr(c.clientName(node)); err != nil {
		return err
	}
	if rejoin && !fleettest.Poll(90*time.Second, func() bool { return c.nodeJoined(node) }) {
		return fmt.Errorf("node %s did not rejoin within 90s", node)
	}
	return c.startErr(c.agentName(node))
}

// partition cuts node off the cluster network and returns its address.
func (c *cluster) partition(node string) string {
	c.t.Helper()
	ip, err := c.partitionErr(node)
	if err != nil {
		c.t.Fatal(err)
	}
	return ip
}

func (c *cluster) partitionErr(node string) (string, error) {
	ctx, cancel := c.ctx()
	defer cancel()
	insp, err := c.docker.ContainerInspect(ctx, c.clientName(node))
	if err != nil || insp.NetworkSettings == nil || insp.NetworkSettings.Networks[c.netName] == nil {
		return "", fmt.Errorf("inspect %s: %v", node, err)
	}
	ip := insp.NetworkSettings.Networks[c.netName].IPAddress
	if err := c.docker.NetworkDisconnect(ctx, c.netName, c.clientName(node), true); err != nil {
		return "", fmt.Errorf("disconnect %s: %w", node, err)
	}
	return ip, nil
}

// heal reconnects node with the address it had: its Consul agent is bound
// to that address, as a host's would be after a network outage.
func (c *cluster) heal(node, ip string) {
	c.t.Helper()
	if err := c.healErr(node, ip); err != nil {
		c.t.Fatal(err)
	}
}

func (c *cluster) healErr(node, ip string) error {
	ctx, cancel := c.ctx()
	defer cancel()
	ep := &network.EndpointSettings{IPAMConfig: &network.EndpointIPAMConfig{IPv4Address: ip}}
	if err := c.docker.NetworkConnect(ctx, c.netName, c.clientName(node), ep); err != nil {
		return fmt.Errorf("reconnect %s: %w", node, err)
	}
	return nil
}

// leader returns the container name of the leading server.
func (c *cluster) leader() string {
	c.t.Helper()
	s, err := c.leaderErr()
	if err != nil {
		c.t.Fatal(err)
	}
	return s
}

func (c *cluster) leaderErr() (string, error) {
	addr, err := c.api().Status().Leader()
	if err != nil || addr == "" {
		return "", fmt.Errorf("no leader: %v", err)
	}
	ip := addr[:strings.LastIndex(addr, ":")]
	ctx, cancel := c.ctx()
	defer cancel()
	for _, s := range c.servers {
		insp, err := c.docker.ContainerInspect(ctx, s)
		if err == nil && insp.NetworkSettings != nil && insp.NetworkSettings.Networks[c.netName] != nil &&
			insp.NetworkSettings.Networks[c.netName].IPAddress == ip {
			return s, nil
		}
	}
	return "", fmt.Errorf("no server has the leader's address %s", addr)
}

// serversWhole says every server answers and names the same leader: a
// server restarted a moment ago may not have rejoined yet, and killing the
// leader then would take the quorum away, which is not the fault meant.
func (c *cluster) serversWhole() bool {
	leader := ""
	for _, s := range c.servers {
		l, err := c.client(s).Status().Leader()
		if err != nil || l == "" || (leader != "" && l != leader) {
			return false
		}
		leader = l
	}
	return true
}

// dumpLogs prints each agent's log tail when the test failed.
func (c *cluster) dumpLogs() {
	if !c.t.Failed() {
		return
	}
	c.logAgents(c.t, "400")
}

// logAgents prints the last tail lines of each agent's log ("all" for the
// whole) to t. A nemesis calls it as it fails, before its cleanup starts
// the agents again, which would leave only their new logs to print.
func (c *cluster) logAgents(t testing.TB, tail string) {
	ctx, cancel := c.ctx()
	defer cancel()
	for node := range c.nodes {
		rc, err := c.docker.ContainerLogs(ctx, c.agentName(node), container.LogsOptions{ShowStdout: true, ShowStderr: true, Tail: tail})
		if err != nil {
			continue
		}
		var out bytes.Buffer
		_, _ = stdcopy.StdCopy(&out, &out, rc)
		rc.Close()
		t.Logf("agent %s log tail:\n%s", node, out.String())
	}
}
