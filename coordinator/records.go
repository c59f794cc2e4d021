package coordinator

import (
	"encoding/json"
	"fmt"
	"regexp"
	"time"

	"github.com/rollagent/rollagent/hashspec"
)

var shaRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// ValidSHA reports whether s looks like a spec SHA.
func ValidSHA(s string) bool { return shaRE.MatchString(s) }

// Desired is the value of the desired key.
type Desired struct {
	SHA         string    `json:"sha"`
	Previous    string    `json:"previous,omitempty"`
	CommittedAt time.Time `json:"committed_at"`
	Author      string    `json:"author,omitempty"`
	Reason      string    `json:"reason,omitempty"` // why: "commit", "rollback to ..."
	// AutoRollback marks a record written by failure_action=rollback (a
	// failure's or the progress deadline's): it goes back to a SHA that
	// converged on every node, which runs without a canary stage
	// (GroupState.autoRollbackPromotion).
	AutoRollback bool `json:"auto_rollback,omitempty"`
}

// HistoryEntry is a committed spec, kept so rollback and status can find it.
type HistoryEntry struct {
	SHA         string          `json:"sha"`
	Spec        json.RawMessage `json:"spec"` // the canonical encoding, readable in the Consul UI
	CommittedAt time.Time       `json:"committed_at"`
	Author      string          `json:"author,omitempty"`

	spec *hashspec.Spec // decoded and checked by check
}

// Decoded returns the spec, decoded strictly and checked against SHA.
func (h *HistoryEntry) Decoded() *hashspec.Spec { return h.spec }

// Cancel is a CANCEL record.
type Cancel struct {
	SHA    string    `json:"sha"`
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
	By     string    `json:"by,omitempty"`
}

// describe says who cancelled and why, as far as the record tells: the
// gate's reason, which agents copy into their state.
func (c *Cancel) describe() string { return describeBrake("cancelled", c.By, c.Reason) }

// describeBrake says what an operator's brake did, who set it and why.
func describeBrake(what, by, reason string) string {
	if by != "" {
		what += " by " + by
	}
	if reason != "" {
		what += ": " + reason
	}
	return what
}

// OperatorPause is an operator's pause of a SHA (`rollagent pause`).
type OperatorPause struct {
	SHA    string    `json:"sha"`
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
	By     string    `json:"by,omitempty"`
}

// Describe says who paused and why, as Cancel's describe does.
func (p *OperatorPause) Describe() string { return describeBrake("paused", p.By, p.Reason) }

// Pause is written when a SHA reached max_failures under failure_action=pause.
type Pause struct {
	SHA      string    `json:"sha"`
	Failures int       `json:"failures"`
	Reason   string    `json:"reason"`
	At       time.Time `json:"at"`
	// Cause is CauseProgressDeadline for the pause a progress deadline
	// made; "" for one failures made.
	Cause string `json:"cause,omitempty"`
}

// Failure is one node's failed replacement.
type Failure struct {
	Node  string    `json:"node"`
	SHA   string    `json:"sha"`
	Error string    `json:"error"`
	At    time.Time `json:"at"`
}

// FailCount is the value of failcount/<sha>. Every failure write for sha
// CASes it, so two failures recorded at once cannot both count from the
// same read.
type FailCount struct {
	SHA      string `json:"sha"`
	Failures int    `json:"failures"` // nodes whose failure of sha is recorded
	// Writes counts failure writes, a node's repeat included. It makes
	// each write change the value: Consul skips a write of an unchanged
	// value, and its index would not move for the next CAS to see.
	Writes uint64    `json:"writes"`
	At     time.Time `json:"at"`
}

// Converged is the value of converged/<sha>: the commit that moved desired
// off sha found it converged (Summary.Done), so failure_action=rollback
// may go back to it.
type Converged struct {
	SHA   string    `json:"sha"`
	At    time.Time `json:"at"`    // when the commit found it converged
	Nodes int       `json:"nodes"` // the nodes that counted, every one converged on it
}

// NodeState is what an agent publishes about its node.
type NodeState struct {
	Node    string     `json:"node"`
	SHA     string     `json:"sha"`               // what runs now ("" when nothing does)
	Desired string     `json:"desired,omitempty"` // what the agent is converging to
	State   NodeStatus `json:"state"`
	Since   time.Time  `json:"since"`
	Error   string     `json:"error,omitempty"`
	// ConsulNode is the name of the Consul node the agent runs on (its
	// local Consul agent's NodeName), "" until the agent has learnt it.
	// It maps a host that goes down to the node even once the node's
	// service left the catalog with a clean stop (Store.Down).
	ConsulNode string `json:"consul_node,omitempty"`
	// Domain is the node's topology domain under the desired spec's
	// update.max_parallel_per ("key=value", Domain), as its agent last read
	// its Consul agent's node meta; "" for none, or not read yet. Kept in
	// the record because the catalog forgets: a down node whose Consul
	// node was pruned from it still counts in its zone (Store.Domains).
	Domain string `json:"domain,omitempty"`
	// Fenced names the destructive step that the fence which wrote this
	// record let the node take, and is written by such a fence alone: a
	// "replacing" record without it (the grant's, a reclaim's, a check
	// before an undo) says the node has passed no gate toward Desired.
	Fenced string `json:"fenced,omitempty"`
	// Stopped is when the agent last stopped cleanly, written just before
	// it leaves Consul's catalog: a node gone from the catalog counts
	// toward progress until LostAfter past this (or past Since, if later),
	// so an agent restarted after a long idle spell is not lost meanwhile.
	// An agent that starts writes its record without it.
	Stopped *time.Time `json:"stopped,omitempty"`
	// StopIndex says that the writer of this record keeps the stop index
	// (Keys.Stopped): a stop mark it writes, it writes there too, in the
	// same transaction. Agents from before the index, and one whose ACL
	// policy refuses it, leave it out, and then Down reads every record
	// (Store.Down).
	StopIndex bool `json:"stop_index,omitempty"`
	// ImageID is the ID of the image the node's workload runs, as its
	// runtime reports it (Docker: the container's image), "" when it has
	// none to report: what runs, where SHA is what was asked for.
	ImageID string `json:"image_id,omitempty"`
	// HealthIndex is on the record a grant writes when the desired spec
	// blocks on Consul checks: the Consul index of the health read the
	// agent made right before the grant's transaction (GateHealth.Index).
	// That read saw every change of a check up to it and none after, so a
	// check that failed at a later index failed between the read and the
	// grant: the window of a hold that Consul does not check in the
	// transaction. Absent on every other record.
	HealthIndex uint64 `json:"health_index,omitempty"`
	// Gate is the state of the closed gate the node waits on (a record
	// that is waiting, paused or cancelled while the gate is closed: the
	// window, a check, a pause), "" otherwise: the Consul UI shows it.
	Gate GateState `json:"gate,omitempty"`
	// Blocked are the Consul checks the node's agent sees not passing
	// while the gate is blocked_by_check, each since it first saw it so
	// (BlockSeen): on a record that carries that Gate, absent otherwise.
	Blocked []BlockSeen `json:"blocked,omitempty"`
	// Drained is what the agent put into Consul maintenance on its node
	// (update.drain), written before it sets any and kept until it has
	// lifted it: nil while nothing is.
	Drained *Drained `json:"drained,omitempty"`
}

// LastSign is the last time the node's agent showed it was there: its
// last change, or its clean stop if later.
func (n *NodeState) LastSign() time.Time {
	if n.Stopped != nil && n.Stopped.After(n.Since) {
		return *n.Stopped
	}
	return n.Since
}

// decode parses a KV value strictly and checks it, so that a value written
// by someone else is reported as exactly that, not acted on.
func decode(key string, b []byte, v interface{ check() error }) error {
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: not a valid record: %w", key, err)
	}
	if err := v.check(); err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	return nil
}

func checkSHA(field, sha string, optional bool) error {
	if sha == "" && optional {
		return nil
	}
	if !ValidSHA(sha) {
		return fmt.Errorf("%s %q is not a SHA-256 hex string", field, sha)
	}
	return nil
}

func (d *Desired) check() error {
	if err := checkSHA("sha", d.SHA, false); err != nil {
		return err
	}
	return checkSHA("previous", d.Previous, true)
}

func (h *HistoryEntry) check() error {
	if err := checkSHA("sha", h.SHA, false); err != nil {
		return err
	}
	if len(h.Spec) == 0 {
		return fmt.Errorf("no spec")
	}
	spec, sha, err := hashspec.Load(h.Spec, hashspec.FormatJSON, "history spec")
	if err != nil {
		return fmt.Errorf("stored spec is invalid: %w", err)
	}
	if sha != h.SHA {
		return fmt.Errorf("stored spec hashes to %s, not %s", sha, h.SHA)
	}
	h.spec = spec
	return nil
}

func (c *Cancel) check() error        { return checkSHA("sha", c.SHA, false) }
func (p *Pause) check() error         { return checkSHA("sha", p.SHA, false) }
func (p *OperatorPause) check() error { return checkSHA("sha", p.SHA, false) }
func (f *Failure) check() error       { return checkSHA("sha", f.SHA, false) }
func (c *FailCount) check() error     { return checkSHA("sha", c.SHA, false) }
func (c *Converged) check() error     { return checkSHA("sha", c.SHA, false) }

func (n *NodeState) check() error {
	if err := hashspec.ValidateName(n.Node); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if !n.State.Valid() {
		return fmt.Errorf("state %q is not one of the known states", n.State)
	}
	if err := checkSHA("sha", n.SHA, true); err != nil {
		return err
	}
	return checkSHA("desired", n.Desired, true)
}
