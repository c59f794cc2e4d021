package main

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"os/user"
	"strings"
	"time"

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
	Pause    PauseCmd    `cmd:"" help:"Pause the group's desired SHA: nothing moves for it until resume (only an operator's token may)."`
	Resume   ResumeCmd   `cmd:"" help:"Lift a pause of the desired SHA, an operator's or a failure pause (a cancel needs a new commit)."`
	Promote  PromoteCmd  `cmd:"" help:"Promote the desired SHA past its canaries (update.canary): the other nodes follow (only an operator's token may; refused under a cancel)."`
	Rollback RollbackCmd `cmd:"" help:"Commit an earlier spec again (by default the previous one)."`
	Status   StatusCmd   `cmd:"" help:"Show a group's rollout: desired SHA, nodes, slot holders."`
	History  HistoryCmd  `cmd:"" help:"List the SHAs committed to a group."`
	Plan     PlanCmd     `cmd:"" help:"Show what a commit of a spec would do (SHA, difference, nodes, gate, time), writing nothing; exit 0 no change, 2 changes, 1 error."`
	Node     NodeCmd     `cmd:"" help:"Manage a group's nodes (rm: remove a node that left)."`
	Hash     HashCmd     `cmd:"" help:"Print the SHA of a spec file, offline (--pin-digest asks the image registry)."`
	Exporter ExporterCmd `cmd:"" help:"Serve Prometheus metrics of whole groups (gate, nodes by state, progress) for alerting."`
	Version  VersionCmd  `cmd:"" help:"Print the version."`
}

// DefaultConsulAddr is where rollagent looks for Consul when neither a flag,
// the environment nor the config file says: the address a Consul agent
// serves HTTP on by default. It is set here rather than left to
// api.DefaultConfig, whose "localhost:8500" may resolve to ::1 first, so
// that the help, the error messages and the connection name one address.
const DefaultConsulAddr = "127.0.0.1:8500"

// Globals are flags every command takes. The Consul address and token take
// ROLLAGENT_* like every other flag and the standard CONSUL_HTTP_* as the
// consul CLI does; the first one set in the env tag's order wins, so the
// more specific ROLLAGENT_* wins over a CONSUL_HTTP_* exported for other
// tools. The rest of the CONSUL_* environment (TLS, token file) is read by
// the Consul client itself.
type Globals struct {
	Config     kong.ConfigFlag `name:"config" help:"JSON file of flag values, keyed by flag name (flags and environment win over it)."`
	ConsulAddr string          `name:"consul-addr" env:"ROLLAGENT_CONSUL_ADDR,CONSUL_HTTP_ADDR" default:"${consul_addr}" help:"Consul HTTP address ([scheme://]host:port or unix://path)."`
	Token      string          `name:"token" env:"ROLLAGENT_TOKEN,CONSUL_HTTP_TOKEN" help:"Consul ACL token."`
	Prefix     string          `name:"prefix" default:"${prefix}" help:"KV prefix of rollagent's state." env:"ROLLAGENT_PREFIX"`
	LogLevel   string          `name:"log-level" default:"info" enum:"trace,debug,info,warn,error" help:"Log level."`
	LogJSON    bool            `name:"log-json" help:"Log as JSON."`
	Timeout    time.Duration   `name:"timeout" default:"${timeout}" help:"Bound of each command's calls to Consul and to an image registry (--pin-digest) (env ROLLAGENT_TIMEOUT); run is not bounded, status --watch bounds each read."`

	addr string `kong:"-"` // the Consul address the client was built for
}

// store builds the Consul client from the environment and flags.
func (g *Globals) store() (*coordinator.Store, error) { return g.storeFrom(api.DefaultConfig()) }

// storeFrom builds the Consul client from cfg and the flags.
func (g *Globals) storeFrom(cfg *api.Config) (*coordinator.Store, error) {
	// Never api.DefaultConfig's "localhost:8500": a variable set to ""
	// counts as not set, as for the token, whose fallbacks (including
	// CONSUL_HTTP_TOKEN_FILE) the client applies itself.
	cfg.Address = cmp.Or(g.ConsulAddr, os.Getenv(api.HTTPAddrEnvName), DefaultConsulAddr)
	if g.Token != "" {
		cfg.Token = g.Token
	}
	socket, isSocket := strings.CutPrefix(cfg.Address, "unix://")
	// Its reads of a group's tree are bounded: any node's token may write
	// its own keys under slot/, and must not make every reader download
	// what it wrote.
	c, err := coordinator.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("consul client: %w", err)
	}
	g.addr = cfg.Scheme + "://" + cfg.Address // NewClient has split the scheme off
	if isSocket {
		g.addr = "unix://" + socket
	}
	st := coordinator.NewStore(c, g.Prefix)
	st.SetAddress(g.addr)
	return st, nil
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
