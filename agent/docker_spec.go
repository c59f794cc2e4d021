package agent

import (
	"fmt"
	"sort"
	"strconv"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/go-connections/nat"
	"github.com/rollagent/rollagent/hashspec"
)

// Labels the agent puts on the containers it manages. They are how a
// restarted agent finds its workload and its SHA: the agent keeps no state of
// its own.
const (
	LabelManaged = "rollagent.managed"
	LabelGroup   = "rollagent.group"
	LabelNode    = "rollagent.node"
	LabelSHA     = "rollagent.sha"
)

// containerConfig turns a spec into Docker's create parameters.
func containerConfig(spec *hashspec.Spec, sha, group, node string, extra map[string]string) (*container.Config, *container.HostConfig, error) {
	c := spec.Container
	labels := map[string]string{}
	for k, v := range c.Labels {
		labels[k] = v
	}
	for k, v := range extra {
		labels[k] = v
	}
	labels[LabelManaged], labels[LabelGroup], labels[LabelNode], labels[LabelSHA] = "true", group, node, sha
	cfg := &container.Config{Image: c.Image, Cmd: c.Cmd, Entrypoint: c.Entrypoint, Env: envList(c.Env), Labels: labels}
	host := &container.HostConfig{
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyMode(c.Restart)},
		Privileged:    c.Privileged,
		NetworkMode:   container.NetworkMode(c.NetworkMode),
		PidMode:       container.PidMode(c.PIDMode),
	}
	if c.Healthcheck != nil {
		h := c.Healthcheck
		cfg.Healthcheck = &container.HealthConfig{Test: h.Test, Interval: h.Interval.Std(), Timeout: h.Timeout.Std(),
			Retries: h.Retries, StartPeriod: h.StartPeriod.Std()}
	}
	if err := addPorts(cfg, host, c.Ports); err != nil {
		return nil, nil, err
	}
	for _, v := range c.Volumes {
		host.Mounts = append(host.Mounts, mount.Mount{Type: mount.Type(v.Type), Source: v.Source, Target: v.Target, ReadOnly: v.ReadOnly})
	}
	return cfg, host, nil
}

func envList(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

func addPorts(cfg *container.Config, host *container.HostConfig, ports []hashspec.Port) error {
	if len(ports) == 0 {
		return nil
	}
	cfg.ExposedPorts = nat.PortSet{}
	host.PortBindings = nat.PortMap{}
	for _, p := range ports {
		port, err := nat.NewPort(p.Protocol, strconv.Itoa(p.Container))
		if err != nil {
			return fmt.Errorf("port %d/%s: %w", p.Container, p.Protocol, err)
		}
		cfg.ExposedPorts[port] = struct{}{}
		if p.Host != 0 {
			host.PortBindings[port] = append(host.PortBindings[port], nat.PortBinding{HostIP: p.HostIP, HostPort: strconv.Itoa(p.Host)})
		}
	}
	return nil
}
