package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rollagent/rollagent/agent"
)

// maxHookTimeout bounds --hook-timeout like a spec's durations: it is a
// term of the node's lease.
const maxHookTimeout = 24 * time.Hour

// RunCmd runs the agent for one node of one group.
type RunCmd struct {
	Group       string            `required:"" help:"Group this node belongs to."`
	Node        string            `help:"This node's name (default: the host name)."`
	Runtime     string            `enum:"docker,exec" default:"docker" help:"How the workload is replaced (docker|exec)."`
	ReplaceCmd  []string          `name:"replace-cmd" sep:"none" help:"exec runtime: command (and args, repeat the flag) that installs ROLLAGENT_SPEC."`
	HealthCmd   []string          `name:"health-cmd" sep:"none" help:"exec runtime: command that exits 0 while the workload is healthy."`
	StateDir    string            `name:"state-dir" default:"/var/lib/rollagent" help:"exec runtime: where the installed SHA is kept."`
	HookEnv     []string          `name:"hook-env" sep:"none" help:"exec runtime: name of a variable of the agent's environment to pass to the hooks (repeatable); they get PATH and the ROLLAGENT_* variables of the run, nothing else. CONSUL_* and ROLLAGENT_* names are refused."`
	HookTimeout time.Duration     `name:"hook-timeout" default:"${hook_timeout}" help:"exec runtime: bound of one run of the replace hook. A node that dies mid-step keeps its slot until a node in line has seen it gone for this + 2 x healthy_deadline + ${exec_lease_slack}."`
	Label       map[string]string `help:"Extra label on managed containers (k=v, repeatable)."`
	SessionTTL  time.Duration     `name:"session-ttl" default:"${session_ttl}" help:"TTL of the check that keeps this agent's slot session alive, 3s to 30s: a dead agent's node is seen down about one TTL after it dies."`
	MetricsAddr string            `name:"metrics-addr" help:"Serve Prometheus metrics on this address (e.g. 127.0.0.1:9464)."`
	HealthAddr  string            `name:"health-addr" default:"auto" help:"Serve the workload's health at /health on this address (e.g. 127.0.0.1:9465) and have the node's Consul agent check it there every ${health_every}, instead of passing a TTL check every ${health_every}; the Consul agent must reach it. auto: on an ephemeral loopback port if the Consul agent is reached over loopback, else a TTL check. off: a TTL check."`

	AllowPrivileged  bool     `name:"allow-privileged" help:"Allow specs that ask for a privileged container."`
	AllowHostNetwork bool     `name:"allow-host-network" help:"Allow specs that ask for the host network."`
	AllowHostPID     bool     `name:"allow-host-pid" help:"Allow specs that ask for the host PID namespace."`
	AllowBind        []string `name:"allow-bind" help:"Host path prefixes specs may bind-mount (repeatable)."`
	AllowVolume      []string `name:"allow-volume" help:"Patterns of the named Docker volumes specs may mount, e.g. 'web-*' (repeatable; none by default)."`
	AllowNetwork     []string `name:"allow-network" help:"Patterns of the Docker networks specs may join besides bridge and none, e.g. 'web-*' (repeatable; none by default)."`
}

// Run runs the agent until interrupted.
func (c *RunCmd) Run(ctx context.Context, g *Globals, log hclog.Logger) error {
	if err := agent.CheckSessionTTL(c.SessionTTL); err != nil {
		return fmt.Errorf("--session-ttl %s: must be between %s and %s", c.SessionTTL, agent.MinSessionTTL, agent.MaxSessionTTL)
	}
	allow := agent.Allow{Privileged: c.AllowPrivileged, HostNetwork: c.AllowHostNetwork, HostPID: c.AllowHostPID,
		BindPrefixes: c.AllowBind, Volumes: c.AllowVolume, Networks: c.AllowNetwork}
	if err := allow.Validate(); err != nil {
		return err
	}
	if c.Node == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("--node not given and no host name: %w", err)
		}
		c.Node = strings.Split(h, ".")[0]
	}
	consul := agent.ConsulConfig()
	st, err := g.storeFrom(consul)
	if err != nil {
		return err
	}
	rt, err := c.runtime(log.With("group", c.Group, "node", c.Node))
	if err != nil {
		return err
	}
	// The servers outlive a SIGTERM until the agent is done: the step under
	// way finishes first, and the Consul agent's check of this process,
	// which keeps the step's session alive, must keep being answered.
	sctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := newPromMetrics(reg, c.Group, c.Node)
	if c.MetricsAddr != "" {
		if err := serveMetrics(sctx, c.MetricsAddr, reg, log.Named("metrics")); err != nil {
			return fmt.Errorf("--metrics-addr %s: %w", c.MetricsAddr, err)
		}
	}
	urls, err := c.workloadCheck(sctx, consul.Address, rt, log.Named("health"))
	if err != nil {
		return err
	}
	a, err := agent.New(agent.Config{Group: c.Group, Node: c.Node, Store: st, Runtime: rt, SessionTTL: c.SessionTTL,
		Allow:  allow,
		Logger: log.Named("agent"), Metrics: metrics,
		HealthURL: urls.Health, AliveURL: urls.Alive})
	if err != nil {
		return err
	}
	return a.Run(ctx)
}

func (c *RunCmd) runtime(log hclog.Logger) (agent.Runtime, error) {
	if err := agent.CheckHookEnv(c.HookEnv); err != nil {
		return nil, fmt.Errorf("--hook-env: %w", err)
	}
	if c.Runtime == "exec" {
		if len(c.ReplaceCmd) == 0 || len(c.HealthCmd) == 0 {
			return nil, fmt.Errorf("--runtime exec needs --replace-cmd and --health-cmd")
		}
		if err := os.MkdirAll(c.StateDir, 0o700); err != nil {
			return nil, fmt.Errorf("--state-dir: %w", err)
		}
		if c.HookTimeout <= 0 {
			return nil, fmt.Errorf("--hook-timeout %s: must be positive", c.HookTimeout)
		}
		if c.HookTimeout > maxHookTimeout {
			return nil, fmt.Errorf("--hook-timeout %s: must be at most %s", c.HookTimeout, maxHookTimeout)
		}
		return &agent.Exec{ReplaceCmd: c.ReplaceCmd, HealthCmd: c.HealthCmd, StateDir: c.StateDir,
			Group: c.Group, Node: c.Node, Log: log, HookTimeout: c.HookTimeout, PassEnv: c.HookEnv}, nil
	}
	cli, err := agent.DialDocker()
	if err != nil {
		return nil, fmt.Errorf("docker client: %w", err)
	}
	return agent.NewDocker(cli, c.Group, c.Node, c.Label, log), nil
}
