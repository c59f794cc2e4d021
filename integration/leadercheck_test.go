package integration

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"
	"github.com/hashicorp/consul/api"
)

// leaderCheckFile is where the leader check's service definition is put
// in a node's Consul client container, for `consul services register`.
const leaderCheckFile = "/leader-check.json"

// setLeaderCheck registers check on node's own Consul client agent,
// passing, as the Raft or Swarm leader's check would be: a TTL check of a
// service of that name, long enough for the scenario. The client listens
// on its loopback alone, so the registration runs inside its container
// with the consul binary there. A check put in the catalog from outside
// would be removed by the agent's anti-entropy.
func (c *cluster) setLeaderCheck(node, check string) error {
	def := fmt.Sprintf(`{"service":{"name":%q,"id":%q,"check":{"id":%q,"name":%q,"ttl":"30m","status":"passing"}}}`,
		check, check, check, check)
	ctx, cancel := c.ctx()
	defer cancel()
	if err := c.copyFile(ctx, c.clientName(node), leaderCheckFile, []byte(def)); err != nil {
		return err
	}
	return c.execIn(ctx, c.clientName(node), "/consul", "services", "register", leaderCheckFile)
}

// dropLeaderCheck deregisters check from node's Consul client agent.
func (c *cluster) dropLeaderCheck(node, check string) error {
	ctx, cancel := c.ctx()
	defer cancel()
	return c.execIn(ctx, c.clientName(node), "/consul", "services", "deregister", "-id="+check)
}

// passingOn lists the Consul nodes check passes on, as the gate reads them
// (Consul's health API), sorted.
func (c *cluster) passingOn(check string) ([]string, error) {
	q := &api.QueryOptions{Filter: fmt.Sprintf("CheckID == %q", check), RequireConsistent: true}
	checks, _, err := c.api().Health().State(api.HealthPassing, q)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, ch := range checks {
		out = append(out, ch.Node)
	}
	slices.Sort(out)
	return out, nil
}

// moveLeaderCheck moves check from one node to another, as leadership
// moves, and waits until Consul shows it passing on to alone.
func (c *cluster) moveLeaderCheck(from, to, check string) {
	c.t.Helper()
	if err := c.setLeaderCheck(to, check); err != nil {
		c.t.Fatalf("register %s on %s: %v", check, to, err)
	}
	if from != "" {
		if err := c.dropLeaderCheck(from, check); err != nil {
			c.t.Fatalf("deregister %s on %s: %v", check, from, err)
		}
	}
	c.waitFor(30*time.Second, check+" passing on "+to+" alone", func() bool {
		on, err := c.passingOn(check)
		return err == nil && slices.Equal(on, []string{to})
	})
}

// copyFile writes one file into a container, through Docker's archive API
// (the Consul image is FROM scratch: no shell to write it with).
func (c *cluster) copyFile(ctx context.Context, name, path string, data []byte) error {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: path[1:], Mode: 0o644, Size: int64(len(data))}); err != nil {
		return err
	}
	if _, err := tw.Write(data); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return c.docker.CopyToContainer(ctx, name, "/", &buf, container.CopyToContainerOptions{})
}

// execIn runs cmd in a running container and fails unless it exits 0.
func (c *cluster) execIn(ctx context.Context, name string, cmd ...string) error {
	ex, err := c.docker.ContainerExecCreate(ctx, name, container.ExecOptions{Cmd: cmd, AttachStdout: true, AttachStderr: true})
	if err != nil {
		return fmt.Errorf("exec %q in %s: %w", cmd, name, err)
	}
	att, err := c.docker.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
	if err != nil {
		return fmt.Errorf("exec %q in %s: %w", cmd, name, err)
	}
	defer att.Close()
	var out bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &out, io.LimitReader(att.Reader, 1<<20)); err != nil {
		return fmt.Errorf("exec %q in %s: %w", cmd, name, err)
	}
	insp, err := c.docker.ContainerExecInspect(ctx, ex.ID)
	switch {
	case err != nil:
		return fmt.Errorf("exec %q in %s: %w", cmd, name, err)
	case insp.Running:
		return fmt.Errorf("exec %q in %s: still running after its output ended", cmd, name)
	case insp.ExitCode != 0:
		return fmt.Errorf("exec %q in %s: exit %d: %s", cmd, name, insp.ExitCode, out.String())
	}
	return nil
}
