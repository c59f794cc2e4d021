package integration

import (
	"bytes"
	"context"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/pkg/stdcopy"
	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/internal/dockertest"
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
	agentCmd := []string{"--consul-addr=127.0.0.1:8500", "--log-level=debug", "run", "--group=" + group, "--node=" + node,
		"--label=" + dockertest.Label + "=" + dockertest.RunID()}
	host := &container.HostConfig{NetworkMode: container.NetworkMode("container:" + c.clientName(node)),
		Binds: []string{"/var/run/docker.sock:/var/run/docker.sock"}}
	c.run(c.agentName(node), &container.Config{Image: c.agent, Cmd: agentCmd, Labels: dockertest.Labels()}, host, false)
	c.nodes[node] = group
}

func (c *cluster) waitNodeHealthy(node string) {
	c.t.Helper()
	c.waitFor(90*time.Second, "node "+node+" to join", func() bool {
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
	})
}

func (c *cluster) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), time.Minute)
}

// kill SIGKILLs containers, as a crash would.
func (c *cluster) kill(names ...string) {
	c.t.Helper()
	ctx, cancel := c.ctx()
	defer cancel()
	for _, n := range names {
		if err := c.docker.ContainerKill(ctx, n, "KILL"); err != nil {
			c.t.Fatalf("kill %s: %v", n, err)
		}
	}
}

// start starts stopped containers again, with their data.
func (c *cluster) start(names ...string) {
	c.t.Helper()
	ctx, cancel := c.ctx()
	defer cancel()
	for _, n := range names {
		if err := c.docker.ContainerStart(ctx, n, container.StartOptions{}); err != nil {
			c.t.Fatalf("start %s: %v", n, err)
		}
	}
}

// killNode kills a node: its Consul client and its agent.
func (c *cluster) killNode(node string) { c.kill(c.agentName(node), c.clientName(node)) }

// reviveNode starts a killed node again and waits until it has rejoined.
func (c *cluster) reviveNode(node string) {
	c.start(c.clientName(node))
	c.waitNodeHealthy(node)
	c.start(c.agentName(node))
}

// partition cuts node off the cluster network and returns its address.
func (c *cluster) partition(node string) string {
	c.t.Helper()
	ctx, cancel := c.ctx()
	defer cancel()
	insp, err := c.docker.ContainerInspect(ctx, c.clientName(node))
	if err != nil || insp.NetworkSettings == nil || insp.NetworkSettings.Networks[c.netName] == nil {
		c.t.Fatalf("inspect %s: %v", node, err)
	}
	ip := insp.NetworkSettings.Networks[c.netName].IPAddress
	if err := c.docker.NetworkDisconnect(ctx, c.netName, c.clientName(node), true); err != nil {
		c.t.Fatalf("disconnect %s: %v", node, err)
	}
	return ip
}

// heal reconnects node with the address it had: its Consul agent is bound
// to that address, as a host's would be after a network outage.
func (c *cluster) heal(node, ip string) {
	c.t.Helper()
	ctx, cancel := c.ctx()
	defer cancel()
	ep := &network.EndpointSettings{IPAMConfig: &network.EndpointIPAMConfig{IPv4Address: ip}}
	if err := c.docker.NetworkConnect(ctx, c.netName, c.clientName(node), ep); err != nil {
		c.t.Fatalf("reconnect %s: %v", node, err)
	}
}

// leader returns the container name of the leading server.
func (c *cluster) leader() string {
	c.t.Helper()
	addr, err := c.api().Status().Leader()
	if err != nil || addr == "" {
		c.t.Fatalf("no leader: %v", err)
	}
	ip := addr[:strings.LastIndex(addr, ":")]
	ctx, cancel := c.ctx()
	defer cancel()
	for _, s := range c.servers {
		insp, err := c.docker.ContainerInspect(ctx, s)
		if err == nil && insp.NetworkSettings != nil && insp.NetworkSettings.Networks[c.netName] != nil &&
			insp.NetworkSettings.Networks[c.netName].IPAddress == ip {
			return s
		}
	}
	c.t.Fatalf("no server has the leader's address %s", addr)
	return ""
}

// dumpLogs prints each agent's log tail when the test failed.
func (c *cluster) dumpLogs() {
	if !c.t.Failed() {
		return
	}
	ctx, cancel := c.ctx()
	defer cancel()
	for node := range c.nodes {
		rc, err := c.docker.ContainerLogs(ctx, c.agentName(node), container.LogsOptions{ShowStdout: true, ShowStderr: true, Tail: "120"})
		if err != nil {
			continue
		}
		var out bytes.Buffer
		_, _ = stdcopy.StdCopy(&out, &out, rc)
		rc.Close()
		c.t.Logf("agent %s log tail:\n%s", node, out.String())
	}
}
