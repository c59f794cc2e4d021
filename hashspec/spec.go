package hashspec

import (
	"fmt"
	"path/filepath"
	"strings"
)

// MaxSpecBytes bounds spec input. Anything larger is rejected before any
// parser sees it, so a hostile or mistaken file cannot make us allocate.
// What may be committed is smaller: see MaxCommitBytes.
const MaxSpecBytes = 1 << 20

// MaxCommitBytes bounds a spec's canonical encoding, which is what a commit
// stores (in its history record, next to the other records of the same
// Consul transaction). Consul refuses a transaction body over 512 KiB
// (txn_max_req_len), and values travel in it base64-encoded, 4 bytes for 3:
// the largest spec that commits on Consul 1.13.9 is 391,837 bytes. 256 KiB
// leaves more than 128 KiB of that for the other records of the
// transaction, an event record included, and for Consul settings other
// than the default. Records already stored are not checked against it, so
// a spec committed before this limit still loads.
const MaxCommitBytes = 256 << 10

// Update.FailureAction values.
const (
	FailurePause    = "pause"
	FailureRollback = "rollback"
	FailureContinue = "continue"
)

// Update.Order values.
const (
	OrderStopFirst  = "stop-first"
	OrderStartFirst = "start-first"
)

// Spec is the desired state of one group. Its SHA (see Spec.SHA) is what
// agents compare against the SHA of their running config.
//
// Spec carries one unexported field: Parse records there which
// defaulted fields were written explicitly as zero, so that WithDefaults
// keeps them (and Validate rejects them) instead of silently replacing
// "max_parallel = 0" with 1. It is nil for every valid spec, so
// reflect.DeepEqual works on defaulted specs; go-cmp users need
// cmpopts.IgnoreUnexported(hashspec.Spec{}).
type Spec struct {
	Name      string    `json:"name"`
	Container Container `json:"container"`
	Update    Update    `json:"update"`

	explicitZero []string
}

// Container describes the one container each node of the group runs.
type Container struct {
	Image       string            `json:"image"`
	Cmd         []string          `json:"cmd,omitempty"`
	Entrypoint  []string          `json:"entrypoint,omitempty"`
	Env         map[string]string `json:"env,omitempty"`
	Ports       []Port            `json:"ports,omitempty"`
	Volumes     []Volume          `json:"volumes,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Restart     string            `json:"restart,omitempty"`
	Healthcheck *Healthcheck      `json:"healthcheck,omitempty"`
	Privileged  bool              `json:"privileged,omitempty"`
	NetworkMode string            `json:"network_mode,omitempty"`
	PIDMode     string            `json:"pid_mode,omitempty"`
}

// Port is one container port, optionally published on the host.
type Port struct {
	Host      int    `json:"host"` // 0 = not published
	Container int    `json:"container"`
	Protocol  string `json:"protocol"`
	HostIP    string `json:"host_ip,omitempty"`
}

// Volume is one mount: a host path ("bind") or a named Docker volume.
type Volume struct {
	Type     string `json:"type"`
	Source   string `json:"source"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"read_only,omitempty"`
}

// Healthcheck overrides the image's HEALTHCHECK.
type Healthcheck struct {
	Test        []string `json:"test"`
	Interval    Duration `json:"interval"`
	Timeout     Duration `json:"timeout"`
	Retries     int      `json:"retries"`
	StartPeriod Duration `json:"start_period"`
}

// Update controls how a new spec is rolled out across the group.
type Update struct {
	// MaxParallel is K, how many nodes may be unavailable at once: a
	// count, or a percentage of the group's nodes that count (Amount.Of).
	MaxParallel     Amount   `json:"max_parallel"`
	MinHealthyTime  Duration `json:"min_healthy_time"`
	HealthyDeadline Duration `json:"healthy_deadline"`
	FailureAction   string   `json:"failure_action"`
	// MaxFailures is how many failures of a SHA set off failure_action:
	// a count, or a percentage of the group's nodes that count.
	MaxFailures Amount `json:"max_failures"`
	Order       string `json:"order"`
	// Windows are the maintenance windows in which slots are granted;
	// optional, none means always.
	Windows []Window `json:"window,omitempty"`
	// BlockOn are Consul services and checks that must be passing, on
	// every node, before any slot is granted; optional.
	BlockOn []Block `json:"block_on,omitempty"`
	// BlockOnNode are checks (or a service's instance) that must be
	// passing on a node's own Consul node before it is granted a slot
	// (its disk, its replication lag); optional.
	BlockOnNode []Block `json:"block_on_node,omitempty"`
	// Stagger is how long the next grant waits after a slot is released
	// (Nomad's stagger, kured's --period), each waiter counting on its own
	// clock from when it saw the release; optional, 0 means no wait.
	Stagger Duration `json:"stagger,omitempty"`
	// Drain puts the node's Consul services into maintenance before its
	// old workload stops; optional.
	Drain *Drain `json:"drain,omitempty"`
	// ProgressDeadline is how long the gate may stay open, with nodes
	// behind, without any node converging, before the rollout counts as
	// failed and failure_action applies, once; optional, 0 is none.
	ProgressDeadline Duration `json:"progress_deadline,omitempty"`
	// After names the groups that must have converged on their own
	// desired SHA before this group is granted a slot; optional.
	After []string `json:"after,omitempty"`
	// Last is the Consul check that passes on the node to move last (the
	// leader); optional.
	Last *Last `json:"last,omitempty"`
	// MaxParallelPer bounds, besides MaxParallel, how many nodes of one
	// topology domain (a Consul node-meta value: a rack, a zone) are
	// unavailable at once; optional, none means no bound per domain.
	MaxParallelPer *Spread `json:"max_parallel_per,omitempty"`
	// Canary is how many nodes take a new SHA first; the rest wait for a
	// promotion (`rollagent promote`, or AutoPromote). Optional, 0 means
	// no canaries: every node goes under max_parallel.
	Canary int `json:"canary,omitempty"`
	// CanaryHealthyTime is how long every canary must have been seen
	// converged, and none down, before AutoPromote promotes; required
	// with AutoPromote, and only with it.
	CanaryHealthyTime Duration `json:"canary_healthy_time,omitempty"`
	// AutoPromote promotes once the canaries have stayed healthy for
	// CanaryHealthyTime; optional, defaults to false: an operator's
	// `rollagent promote`.
	AutoPromote bool `json:"auto_promote,omitempty"`
}

// Format is the syntax of a spec file.
type Format int

// Supported formats.
const (
	FormatJSON Format = iota
	FormatHCL
)

func (f Format) String() string {
	switch f {
	case FormatJSON:
		return "json"
	case FormatHCL:
		return "hcl"
	}
	return fmt.Sprintf("Format(%d)", int(f))
}

// FormatFromPath picks the format from the file extension (.json or .hcl,
// case-insensitive).
func FormatFromPath(path string) (Format, error) {
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".json":
		return FormatJSON, nil
	case ".hcl":
		return FormatHCL, nil
	default:
		return 0, fmt.Errorf("%s: unsupported spec file extension %q (want .json or .hcl)", path, ext)
	}
}
