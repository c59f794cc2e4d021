package main

import (
	"fmt"
	"io"
	"os"
	"os/user"

	"github.com/alecthomas/kong"
	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
)

// CLI is the command tree.
type CLI struct {
	Globals

	Run      RunCmd      `cmd:"" help:"Run the agent for one node of a group."`
	Commit   CommitCmd   `cmd:"" help:"Validate a spec, store it and make it the group's desired spec."`
	Cancel   CancelCmd   `cmd:"" help:"Persist a CANCEL for the group's desired SHA: nothing moves for it any more."`
	Resume   ResumeCmd   `cmd:"" help:"Lift a failure pause of the desired SHA (a cancel needs a new commit)."`
	Rollback RollbackCmd `cmd:"" help:"Commit an earlier spec again (by default the previous one)."`
	Status   StatusCmd   `cmd:"" help:"Show a group's rollout: desired SHA, nodes, slot holders."`
	History  HistoryCmd  `cmd:"" help:"List the SHAs committed to a group."`
	Hash     HashCmd     `cmd:"" help:"Print the SHA of a spec file, offline."`
	Exporter ExporterCmd `cmd:"" help:"Serve Prometheus metrics of whole groups (gate, nodes by state, progress) for alerting."`
	Version  VersionCmd  `cmd:"" help:"Print the version."`
}

// Globals are flags every command takes. Consul settings default to the
// standard CONSUL_* environment, as with the consul CLI.
type Globals struct {
	Config     kong.ConfigFlag `name:"config" help:"JSON file of flag values, keyed by flag name (flags and environment win over it)."`
	ConsulAddr string          `name:"consul-addr" env:"CONSUL_HTTP_ADDR" help:"Consul HTTP address (default 127.0.0.1:8500)."`
	Token      string          `name:"token" env:"CONSUL_HTTP_TOKEN" help:"Consul ACL token."`
	Prefix     string          `name:"prefix" default:"${prefix}" help:"KV prefix of rollagent's state." env:"ROLLAGENT_PREFIX"`
	LogLevel   string          `name:"log-level" default:"info" enum:"trace,debug,info,warn,error" help:"Log level."`
	LogJSON    bool            `name:"log-json" help:"Log as JSON."`
}

// store builds the Consul client from the environment and flags.
func (g *Globals) store() (*coordinator.Store, error) { return g.storeFrom(api.DefaultConfig()) }

// storeFrom builds the Consul client from cfg and the flags.
func (g *Globals) storeFrom(cfg *api.Config) (*coordinator.Store, error) {
	if g.ConsulAddr != "" {
		cfg.Address = g.ConsulAddr
	}
	if g.Token != "" {
		cfg.Token = g.Token
	}
	c, err := api.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("consul client: %w", err)
	}
	return coordinator.NewStore(c, g.Prefix), nil
}

// who names the person or process making a change, for the records.
func who() string {
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	host, _ := os.Hostname()
	return name + "@" + host
}

// VersionCmd prints the version.
type VersionCmd struct{}

// Run prints the version.
func (VersionCmd) Run(out io.Writer) error {
	_, err := fmt.Fprintf(out, "rollagent %s\n", version)
	return err
}
