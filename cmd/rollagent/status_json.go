package main

import (
	"sort"
	"time"

	"github.com/rollagent/rollagent/coordinator"
)

// statusSchema is bumped on any change that could break a script reading
// `status -o json`; fields are only ever added within one schema.
const statusSchema = 2

// statusJSON is the stable schema of `status -o json`, documented in
// docs/status-json.md. It has its own types rather than coordinator's so
// that an internal rename cannot change what scripts parse.
type statusJSON struct {
	Schema   int                   `json:"schema"`
	Group    string                `json:"group"`
	At       time.Time             `json:"at"`
	Desired  *coordinator.Desired  `json:"desired"`
	Gate     gateJSON              `json:"gate"`
	Progress progressJSON          `json:"progress"`
	Nodes    []nodeJSON            `json:"nodes"`
	Holders  []holderJSON          `json:"holders"`
	Orphans  []claimJSON           `json:"orphaned_claims"`
	Down     []string              `json:"unavailable"`
	Waiting  int                   `json:"waiting_for_slot"`
	Failures []coordinator.Failure `json:"failures"`
	Problems []string              `json:"problems"`
	// ImageSplits are the SHAs whose nodes run different images.
	ImageSplits []imageSplitJSON `json:"image_splits"`
	Budget      budgetJSON       `json:"slot_budget"`
	Stall       *stallJSON       `json:"stall"` // null unless the group is stalled
	// Deadline is the progress deadline, null when the spec has none.
	Deadline *deadlineJSON `json:"progress_deadline"`
	Canary   *canaryJSON   `json:"canary,omitempty"` // absent unless the desired spec has canaries
	Outage   *outageJSON   `json:"outage,omitempty"` // status --watch only, while Consul does not answer

	// DomainWaits are the waiting nodes whose domain is full
	// (update.max_parallel_per).
	DomainWaits []domainWaitJSON `json:"domain_waits"`

	// DownWhy says why each of Down is down.
	DownWhy map[string]coordinator.DownReason `json:"unavailable_why,omitempty"`
	// GoLast are the nodes that wait to go last (update.last).
	GoLast []goLastJSON `json:"waiting_to_go_last"`
}

// goLastJSON is a node that waits to go last: the check of update.last
// passes on its Consul node, and another node is behind.
type goLastJSON struct {
	Node  string `json:"node"`
	Check string `json:"check"`
}

type gateJSON struct {
	Open   bool                  `json:"open"`
	State  coordinator.GateState `json:"state"`
	Reason string                `json:"reason"`
	// OpensAt is when the clock alone opens a closed gate (a maintenance
	// window), null when only a write to Consul can.
	OpensAt *time.Time `json:"opens_at"`
	SHA     string     `json:"sha,omitempty"`
	// MaxParallel is the policy's K, while the gate is closed too: the
	// number a percentage means now.
	MaxParallel int `json:"max_parallel"`
	// MaxParallelPolicy is max_parallel as the spec writes it: "2", "25%".
	MaxParallelPolicy string `json:"max_parallel_policy"`
	// MaxFailures is the number max_failures means now, and
	// MaxFailuresPolicy how the spec writes it.
	MaxFailures       int    `json:"max_failures"`
	MaxFailuresPolicy string `json:"max_failures_policy"`
	// Nodes are the group's nodes that count, which a percentage is of.
	Nodes int `json:"nodes"`
	// PassedFence are, under a CANCEL, the nodes that may still finish a
	// step toward the cancelled SHA (coordinator.GroupState.PassedFence).
	PassedFence []fencedJSON `json:"passed_fence"`
	// BlockedBy are the blocks of update.block_on that do not pass.
	BlockedBy []blockJSON `json:"blocked_by"`
}

// blockJSON is a block of update.block_on that does not pass: the check
// that fails it, or none when no check matches it.
type blockJSON struct {
	Block   string `json:"block"`
	Check   string `json:"check,omitempty"`
	Status  string `json:"status,omitempty"`
	Node    string `json:"node,omitempty"`
	Service string `json:"service,omitempty"`
	// Since is when an agent first saw the check not passing
	// (coordinator.BlockFailure.Since), null when no record says.
	Since *time.Time `json:"since"`
}

func blockedBy(h *coordinator.GateHealth) []blockJSON {
	out := []blockJSON{}
	if h == nil {
		return out
	}
	for _, f := range h.Failing {
		b := blockJSON{Block: f.Block.String(), Check: f.Check, Status: f.Status, Node: f.Node, Service: f.Service}
		if !f.Since.IsZero() {
			since := f.Since
			b.Since = &since
		}
		out = append(out, b)
	}
	return out
}

// fencedJSON is a node that passed a fence toward a cancelled SHA before
// the CANCEL.
type fencedJSON struct {
	Node  string                 `json:"node"`
	SHA   string                 `json:"sha"`
	State coordinator.NodeStatus `json:"state"`          // replacing or verifying
	Step  string                 `json:"step,omitempty"` // what its fence let it do; absent when verifying
	Since time.Time              `json:"since"`
}

type progressJSON struct {
	Total     int  `json:"total"` // the nodes that count: every row but the lost
	Converged int  `json:"converged"`
	Replacing int  `json:"replacing"`
	Verifying int  `json:"verifying"`
	Waiting   int  `json:"waiting"`
	Failed    int  `json:"failed"`
	Lost      int  `json:"lost"`
	Other     int  `json:"other"` // counted, in none of the fields above
	Done      bool `json:"done"`
	// ByState has every coordinator.Standing as a key; its values add up
	// to the rows of nodes.
	ByState map[coordinator.Standing]int `json:"by_state"`
	ETA     *etaJSON                     `json:"eta"` // null while there is no pace to go by
}

// nodeJSON is one row: a node's record as its agent published it, and how
// status counts it.
type nodeJSON struct {
	Node    string                 `json:"node"`
	SHA     string                 `json:"sha"`
	Desired string                 `json:"desired,omitempty"`
	State   coordinator.NodeStatus `json:"state"` // "invalid" for a record that does not decode
	Since   *time.Time             `json:"since,omitempty"`
	Stopped *time.Time             `json:"stopped,omitempty"` // its agent's last clean stop, while not started since
	Error   string                 `json:"error,omitempty"`
	ImageID string                 `json:"image_id,omitempty"` // the image its workload runs, as its runtime reports it
	// CountedAs is the key of progress.by_state this row adds to.
	CountedAs coordinator.Standing `json:"counted_as"`
	Consul    coordinator.Presence `json:"consul"`
	Counts    bool                 `json:"counts"`
	// Canary: the node is one of the desired SHA's canaries.
	Canary bool `json:"canary,omitempty"`
}

// imageSplitJSON is one SHA that nodes run from different images.
type imageSplitJSON struct {
	SHA    string          `json:"sha"`
	Images []imageNodeJSON `json:"images"` // by image ID
}

type imageNodeJSON struct {
	ImageID string   `json:"image_id"`
	Nodes   []string `json:"nodes"`
}

func imageSplits(nodes []coordinator.NodeState) []imageSplitJSON {
	out := []imageSplitJSON{}
	for _, sp := range coordinator.ImageSplits(nodes) {
		j := imageSplitJSON{SHA: sp.SHA}
		for id, ns := range sp.Images {
			j.Images = append(j.Images, imageNodeJSON{ImageID: id, Nodes: ns})
		}
		sort.Slice(j.Images, func(a, b int) bool { return j.Images[a].ImageID < j.Images[b].ImageID })
		out = append(out, j)
	}
	return out
}

// stateInvalid is the state shown for a record that does not decode: no
// agent publishes it.
const stateInvalid coordinator.NodeStatus = "invalid"

type etaJSON struct {
	Seconds        float64 `json:"seconds"`
	PerNodeSeconds float64 `json:"per_node_seconds"`
	Basis          int     `json:"basis"` // nodes converged since the commit
}

type holderJSON struct {
	Name  string    `json:"name"`
	Since time.Time `json:"since"`
}

// claimJSON is a node's claim on a slot whose process is gone: the node
// still counts against max_parallel until it is back, or until a node in
// line that saw it gone for its whole lease (Until less Since) reports it
// lost.
type claimJSON struct {
	Name  string    `json:"name"`
	Since time.Time `json:"since"`
	Until time.Time `json:"until"`
	// Counts is false once Lost: then it no longer holds the rollout back.
	// No clock ends it: Until is only the earliest it may be reported.
	Counts bool `json:"counts"`
	// Lost says a waiter recorded the node failed as lost.
	Lost bool `json:"lost"`
}

// statusOptions are the choices of the status command that change what
// the document says.
type statusOptions struct {
	LostAfter time.Duration
}

func opensAt(v coordinator.Verdict) *time.Time {
	if v.Open || v.Poll || v.Recheck.IsZero() {
		return nil
	}
	t := v.Recheck.UTC()
	return &t
}

// staggerEstimate follows a stagger's wait in status: status can only
// count from its own first sight of the release, as each agent does.
const staggerEstimate = "; an estimate from this status's first sight of the release: each agent counts from its own"

// canaryEstimate follows an auto-promotion's wait in status, which counts
// from its own sight of the canaries healthy, as each agent does.
const canaryEstimate = "; an estimate from this status's sight of the canaries healthy: each agent counts from its own"

// gateReason is the gate's reason as of now, with how long a wait the
// clock alone ends has left.
func gateReason(v coordinator.Verdict, now time.Time) string {
	if v.State == coordinator.GateStagger {
		return v.Wait(now) + staggerEstimate
	}
	if v.State == coordinator.GateAwaitingPromotion && v.Recheck.After(now) && !v.Poll {
		return v.Wait(now) + canaryEstimate
	}
	return v.Wait(now)
}

// newGateJSON is the verdict with the policy: max_parallel and max_failures
// as the spec writes them and the numbers they mean for the group now.
func newGateJSON(gs *coordinator.GroupState, v coordinator.Verdict, now time.Time) gateJSON {
	g := gateJSON{Open: v.Open, State: v.State, Reason: gateReason(v, now), OpensAt: opensAt(v), SHA: v.SHA,
		MaxParallel: v.MaxParallel, Nodes: gs.NodeCount(), PassedFence: passedFence(gs), BlockedBy: blockedBy(gs.Health)}
	if gs.Spec != nil {
		g.MaxParallelPolicy = v.Policy.String()
		g.MaxFailures, g.MaxFailuresPolicy = gs.MaxFailures(), gs.Spec.Update.MaxFailures.String()
	}
	return g
}

func newStatusJSON(gs *coordinator.GroupState, o statusOptions, now time.Time) statusJSON {
	sum := gs.Summary(now, o.LostAfter)
	v := sum.Gate
	s := statusJSON{Schema: statusSchema, Group: gs.Group, At: now, Desired: gs.Desired,
		Gate:     newGateJSON(gs, v, now),
		Progress: newProgressJSON(sum),
		Nodes:    nodeRows(sum), Holders: []holderJSON{}, Orphans: []claimJSON{}, Down: nonNil(gs.Unavailable), DownWhy: gs.DownWhy, Failures: nonNil(gs.Failures),
		Problems: nonNil(gs.Problems), ImageSplits: imageSplits(gs.Nodes), Deadline: progressDeadline(gs), GoLast: []goLastJSON{}}
	for _, n := range gs.LastWaiters() {
		s.GoLast = append(s.GoLast, goLastJSON{Node: n, Check: gs.Last.Check})
	}
	if e, ok := estimate(gs, sum, now); ok {
		s.Progress.ETA = &etaJSON{Seconds: e.left.Seconds(), PerNodeSeconds: e.perNode.Seconds(), Basis: e.basis}
	}
	if s.Canary = newCanaryJSON(gs); s.Canary != nil {
		for i := range s.Nodes {
			s.Nodes[i].Canary = gs.Canaries.Has(s.Nodes[i].Node)
		}
	}
	if gs.Holders != nil {
		for _, h := range gs.Holders.Holding {
			s.Holders = append(s.Holders, holderJSON{Name: h.Name, Since: h.Since})
		}
		sort.Slice(s.Holders, func(i, j int) bool { return s.Holders[i].Name < s.Holders[j].Name })
		s.Orphans = orphans(gs)
		s.Waiting = len(gs.Holders.Waiting)
	}
	diagnose(&s, gs, sum, now)
	return s
}

func newProgressJSON(sum coordinator.Summary) progressJSON {
	c := sum.Progress()
	return progressJSON{Total: c.Total, Converged: c.Converged, Replacing: c.Replacing, Verifying: c.Verifying,
		Waiting: c.Waiting, Failed: c.Failed, Lost: sum.ByState[coordinator.StandingLost], Other: c.Other,
		Done: c.Done, ByState: sum.ByState}
}

// nodeRows are the summary's rows, sorted by name, invalid records among
// them.
func nodeRows(sum coordinator.Summary) []nodeJSON {
	out := make([]nodeJSON, 0, len(sum.Rows))
	for _, r := range sum.Rows {
		n := nodeJSON{Node: r.Node, State: stateInvalid, Error: r.Problem, CountedAs: r.Standing, Consul: r.Presence, Counts: r.Counts}
		if rec := r.Record; rec != nil {
			since := rec.Since
			n.SHA, n.Desired, n.State, n.Since, n.Stopped, n.Error = rec.SHA, rec.Desired, rec.State, &since, rec.Stopped, rec.Error
			n.ImageID = rec.ImageID
		}
		out = append(out, n)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

func passedFence(gs *coordinator.GroupState) []fencedJSON {
	out := []fencedJSON{}
	for _, n := range gs.PassedFence() {
		f := fencedJSON{Node: n.Node, SHA: n.SHA, State: n.State, Since: n.Since}
		if n.State == coordinator.StateReplacing {
			f.Step = n.Fenced
		}
		out = append(out, f)
	}
	return out
}

// nonNil makes an empty list encode as [] rather than null, so scripts can
// iterate without a guard.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// orphans lists the claims of gs whose session is gone, by node name.
func orphans(gs *coordinator.GroupState) []claimJSON {
	h := gs.Holders
	out := []claimJSON{}
	counted := map[string]bool{}
	for _, n := range h.Counted() {
		counted[n] = true
	}
	for name, c := range h.Claims {
		if !h.Live(c.Session) {
			out = append(out, claimJSON{Name: name, Since: c.Since, Until: c.Until, Counts: counted[name], Lost: c.Lost})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
