package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/wallclock"
)

// PlanCmd shows what a commit of a spec would do, and writes nothing.
type PlanCmd struct {
	Group string `arg:"" help:"Group name."`
	SpecFlags
	PinFlags
	Output    string        `short:"o" enum:"table,json" default:"table" help:"Output format (table|json)."`
	LostAfter time.Duration `name:"lost-after" default:"${lost_after}" help:"As for status: a node gone from Consul's catalog this long no longer counts, and would not move."`
}

// errChanges is returned by a plan that would change something: the
// command exits 2, as terraform plan -detailed-exitcode does, so that a
// script tells "no change" (0) from "changes" (2) from an error (1).
var errChanges = errors.New("the plan has changes")

// exitChanges is the exit status of a plan with changes.
const exitChanges = 2

// Run reads the group, plans the commit and prints the plan.
func (c *PlanCmd) Run(ctx context.Context, g *Globals, out io.Writer) error {
	if err := hashspec.ValidateName(c.Group); err != nil {
		return fmt.Errorf("group: %w", err)
	}
	spec, sha, err := loadSpec(c.File, c.Format, c.Group)
	if err != nil {
		return err
	}
	if spec, sha, err = c.pin(ctx, spec, sha, g.Timeout); err != nil {
		return err
	}
	st, err := g.store()
	if err != nil {
		return err
	}
	st = st.WithLostAfter(c.LostAfter) // update.after and update.last count as the plan does
	gs, err := st.Read(ctx, c.Group, nil)
	if err != nil {
		return err
	}
	withUnavailable(ctx, st, gs)
	now := wallclock.Now()
	planned := st.Planned(ctx, gs, spec, sha, now)
	if planned.Domains, err = plannedDomains(ctx, st, gs, spec); err != nil {
		gs.Problems = append(gs.Problems, "cannot tell the nodes' domains for max_parallel_per: "+err.Error())
	}
	p, err := newPlan(gs, planned, spec, sha, c.LostAfter, now)
	if err != nil {
		return err
	}
	if err := c.print(out, p); err != nil {
		return err
	}
	switch {
	case p.Refused != "":
		return errors.New(p.Refused)
	case p.Changes:
		return errChanges
	}
	return nil
}

func (c *PlanCmd) print(out io.Writer, p planJSON) error {
	if c.Output == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(p)
	}
	return printPlan(out, p)
}

// planSchema is bumped on any change that could break a script reading
// `plan -o json` (docs/plan-json.md); fields are only added within one.
const planSchema = 1

// planJSON is the stable schema of `plan -o json`, documented in
// docs/plan-json.md.
type planJSON struct {
	Schema  int                  `json:"schema"`
	Group   string               `json:"group"`
	At      time.Time            `json:"at"`
	SHA     string               `json:"sha"`
	Desired *coordinator.Desired `json:"desired"`
	Changes bool                 `json:"changes"`
	// Refused says why a commit of the spec would be refused ("" when
	// it would not).
	Refused    string        `json:"refused,omitempty"`
	Diff       []fieldChange `json:"diff"`
	PolicyOnly bool          `json:"policy_only"`
	Nodes      planNodesJSON `json:"nodes"`
	Gate       planGateJSON  `json:"gate"`
	Estimate   *estimateJSON `json:"estimate"`
	Notes      []string      `json:"notes"`
	Problems   []string      `json:"problems"`
}

type planNodesJSON struct {
	Total   int           `json:"total"`
	Move    []moveJSON    `json:"move"`
	Refused []refusedJSON `json:"refused"`
	Order   string        `json:"order"`
}

type moveJSON struct {
	Node  string                 `json:"node"`
	SHA   string                 `json:"sha"`
	State coordinator.NodeStatus `json:"state"`
	Down  coordinator.DownReason `json:"down,omitempty"`
	// Canary: one of the canaries the commit would choose, which go first.
	Canary bool `json:"canary,omitempty"`
	// Last says why the node goes last (update.last), "" when it does not.
	Last string `json:"last,omitempty"`
	// Domain is the node's under update.max_parallel_per ("zone=a"), ""
	// without one or when its Consul node has no value: its own domain.
	Domain string `json:"domain,omitempty"`
}

type refusedJSON struct {
	Node  string `json:"node"`
	Error string `json:"error"`
}

type planGateJSON struct {
	Open        bool                  `json:"open"`
	State       coordinator.GateState `json:"state"`
	Reason      string                `json:"reason"`
	Hold        bool                  `json:"hold"`
	OpensAt     *time.Time            `json:"opens_at"`
	MaxParallel int                   `json:"max_parallel"`
	// MaxParallelPolicy is max_parallel as the spec writes it, and Nodes
	// the group's nodes a percentage of it is of.
	MaxParallelPolicy string `json:"max_parallel_policy"`
	Nodes             int    `json:"nodes"`
	// MaxParallelPer is the spec's update.max_parallel_per, or nil.
	MaxParallelPer *hashspec.Spread `json:"max_parallel_per"`
}

// estimateJSON is how long the rollout should take at the pace of the
// group's last one.
type estimateJSON struct {
	Seconds        float64 `json:"seconds"`
	Waves          int     `json:"waves"`
	PerWaveSeconds float64 `json:"per_wave_seconds"`
	MaxParallel    int     `json:"max_parallel"`
	// MaxParallelPer is the spec's update.max_parallel_per, which the
	// waves count with, or nil.
	MaxParallelPer *hashspec.Spread `json:"max_parallel_per"`
	From           paceJSON         `json:"from"`
}

// paceJSON is the rollout an estimate rests on.
type paceJSON struct {
	SHA         string  `json:"sha"`
	Nodes       int     `json:"nodes"`
	Seconds     float64 `json:"seconds"`
	MaxParallel int     `json:"max_parallel"`
}

// planOrder is what a plan can say of the order: agents take a slot in the
// order they join the line (FIFO), which is when each looks, and a node
// whose workload is down claims its slot ahead of the line. The canaries
// (orderCanaries) and the nodes that go last (orderLast) are not an
// estimate: the gate holds the others until them, and them until the rest.
const (
	planOrder     = "estimated order: by when each agent looks; nodes down first"
	orderCanaries = "canaries first, then "
	orderLast     = "; the nodes update.last's check passes on at the end, once every other node converged"
	orderSpread   = "; the domains of update.max_parallel_per taken in turn: the fastest a first-come line allows, as a head whose domain is full holds it"
)

// orderOf says how moves are ordered, spread or not over domains.
func orderOf(moves []moveJSON, spread bool) string {
	order := planOrder
	if slices.ContainsFunc(moves, func(m moveJSON) bool { return m.Canary }) {
		order = strings.Replace(order, "estimated order: ", "estimated order: "+orderCanaries, 1)
	}
	if slices.ContainsFunc(moves, func(m moveJSON) bool { return m.Last != "" }) {
		order += orderLast
	}
	if spread {
		order += orderSpread
	}
	return order
}

func newPlan(gs, planned *coordinator.GroupState, spec *hashspec.Spec, sha string, lostAfter time.Duration, now time.Time) (planJSON, error) {
	p := planJSON{Schema: planSchema, Group: gs.Group, At: now, SHA: sha, Desired: gs.Desired,
		Diff: []fieldChange{}, Notes: []string{}, Problems: nonNil(gs.Problems)}
	p.Changes = gs.Desired == nil || gs.Desired.SHA != sha
	if gs.Cancelled(sha) {
		p.Refused = fmt.Sprintf("SHA %s of group %s was cancelled: a commit of it is refused; change the spec to get a new SHA",
			coordinator.ShortSHA(sha), gs.Group)
	}
	var err error
	if p.Diff, err = specDiff(gs.Spec, spec); err != nil {
		return p, err
	}
	p.Diff = nonNil(p.Diff)
	if gs.Desired != nil && gs.Spec == nil {
		p.Notes = append(p.Notes, "the desired spec is missing from history: every field is shown as added")
	}
	p.PolicyOnly = p.Changes && policyOnly(p.Diff)
	sum := planned.Summary(now, lostAfter)
	v := sum.Gate
	p.Gate = planGateJSON{Open: v.Open, State: v.State, Reason: planGateReason(v, now), Hold: v.Hold, OpensAt: opensAt(v),
		MaxParallel: v.MaxParallel, MaxParallelPolicy: v.Policy.String(), Nodes: planned.NodeCount(), MaxParallelPer: spec.Update.MaxParallelPer}
	p.Nodes = planNodesJSON{Total: sum.Counted, Move: []moveJSON{}, Refused: []refusedJSON{}, Order: planOrder}
	if !p.Changes {
		// The nodes still on their way to the desired SHA move whether
		// or not the spec is committed again: not for this plan.
		return p, nil
	}
	p.Nodes = planNodes(planned, sum, spec.Update.MaxParallelPer)
	p.Estimate = planEstimate(gs, p.Nodes.Move, spec.Update.MaxParallel.Of(planned.NodeCount()), spec.Update.MaxParallelPer)
	p.Notes = append(p.Notes, planNotes(gs, p)...)
	if l := planned.Last; l != nil && l.Err != "" {
		p.Notes = append(p.Notes, fmt.Sprintf("cannot read Consul check %q for update.last (%s): the node to go last is not known, and the order does not show it", l.Check, l.Err))
	}
	if c := planned.Canaries; c != nil && len(c.Nodes) > 0 {
		p.Notes = append(p.Notes, fmt.Sprintf("canaries %s go first; the rest wait for `rollagent promote %s`%s",
			strings.Join(c.Nodes, ", "), gs.Group, autoPromoteNote(spec)))
	}
	return p, nil
}

// planNodes are the nodes that would move to the planned SHA, in the order
// they would likely take a slot, each in its domain under spread, and
// those a failure of it refused.
func planNodes(planned *coordinator.GroupState, sum coordinator.Summary, spread *hashspec.Spread) planNodesJSON {
	n := planNodesJSON{Total: sum.Counted, Move: []moveJSON{}, Refused: []refusedJSON{}, Order: planOrder}
	failed := map[string]string{}
	for _, f := range planned.Failures {
		failed[f.Node] = f.Error
	}
	for _, r := range sum.Rows {
		switch {
		case !r.Counts || r.Standing == coordinator.StandingConverged:
		case failed[r.Node] != "":
			n.Refused = append(n.Refused, refusedJSON{Node: r.Node, Error: failed[r.Node]})
		case r.Record == nil:
			n.Move = append(n.Move, moveJSON{Node: r.Node, State: coordinator.NodeStatus(coordinator.StandingInvalid), Down: planned.DownWhy[r.Node],
				Canary: planned.Canaries.Has(r.Node)})
		default:
			n.Move = append(n.Move, moveJSON{Node: r.Node, SHA: r.Record.SHA, State: r.Record.State, Down: planned.DownWhy[r.Node],
				Canary: planned.Canaries.Has(r.Node), Last: goesLast(planned.Last, r.Record.ConsulNode)})
		}
	}
	// Stable: by name within each kind, as Rows are.
	slices.SortStableFunc(n.Move, func(a, b moveJSON) int {
		if c := moveRank(a) - moveRank(b); c != 0 {
			return c
		}
		return boolRank(a.Down == "") - boolRank(b.Down == "")
	})
	if spread != nil {
		for i := range n.Move {
			n.Move[i].Domain = planned.Domains[n.Move[i].Node]
		}
		spreadOrder(n.Move)
	}
	n.Order = orderOf(n.Move, spread != nil)
	return n
}

// moveRank is a move's place as the gate sets it: the canaries before the
// rest (canaryRule), the nodes that go last after them (lastRule).
func moveRank(m moveJSON) int {
	switch {
	case m.Canary:
		return 0
	case m.Last != "":
		return 2
	}
	return 1
}

// goesLast says why a node on Consul node consulNode goes last, as the
// gate's lastRule judges it (LastState.GoesLast), or "".
func goesLast(l *coordinator.LastState, consulNode string) string {
	if !l.GoesLast(consulNode) {
		return ""
	}
	return fmt.Sprintf("check %q passes on its Consul node %s", l.Check, consulNode)
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

// planEstimate is the waves the moves take in their order (planWaves: K,
// the spread, the gate's phases), each as long as one wave of the desired
// SHA's rollout took: the span from its commit to its latest convergence,
// over the waves its policy made of the nodes that converged (paceWaves).
// nil when that rollout has no node converged to go by.
func planEstimate(gs *coordinator.GroupState, moves []moveJSON, k int, spread *hashspec.Spread) *estimateJSON {
	if gs.Desired == nil || gs.Spec == nil || len(moves) == 0 {
		return nil
	}
	basis, last := pace(gs)
	if basis == 0 {
		return nil
	}
	span := last.Sub(gs.Desired.CommittedAt)
	// A percentage as the group is now: the number it meant then is not kept.
	oldK := max(gs.Spec.Update.MaxParallel.Of(gs.NodeCount()), 1)
	wave := span / time.Duration(paceWaves(gs, basis, oldK))
	perDomain := 0
	if spread != nil {
		perDomain = spread.Max
	}
	waves := planWaves(moves, k, perDomain)
	return &estimateJSON{Seconds: (wave * time.Duration(waves)).Seconds(), Waves: waves, PerWaveSeconds: wave.Seconds(), MaxParallel: k, MaxParallelPer: spread,
		From: paceJSON{SHA: gs.Desired.SHA, Nodes: basis, Seconds: span.Seconds(), MaxParallel: oldK}}
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// planNotes say what the rest of the plan does not: what a policy-only
// change does to each node, and which brakes of the current SHA a commit
// leaves behind.
func planNotes(gs *coordinator.GroupState, p planJSON) []string {
	var notes []string
	if p.PolicyOnly {
		notes = append(notes, "only the update policy changed, but the SHA changes with it: every node's agent "+
			"replaces its workload to take the new SHA up (Docker: the same container spec, created and started again; exec: the replace command run again), under the new policy")
	}
	if gs.Cancel != nil {
		notes = append(notes, fmt.Sprintf("the CANCEL of %s does not apply to the new SHA", coordinator.ShortSHA(gs.Cancel.SHA)))
	}
	if gs.Pause != nil {
		notes = append(notes, fmt.Sprintf("the failure pause of %s does not apply to the new SHA", coordinator.ShortSHA(gs.Pause.SHA)))
	}
	return notes
}

// planGateReason is the gate's reason as status gives it, but a stagger's:
// a plan is a new process, which sees the slot's latest release for the
// first time, so its wait is the longest an agent could have; an agent
// that saw the release earlier waits less, or not at all.
func planGateReason(v coordinator.Verdict, now time.Time) string {
	if v.State == coordinator.GateStagger {
		return v.Wait(now) + "; counted from this plan's first sight of the release: an agent that saw it earlier waits less"
	}
	return gateReason(v, now)
}

// autoPromoteNote says, for a plan's note, when the rest follow without a
// promotion.
func autoPromoteNote(spec *hashspec.Spec) string {
	if !spec.Update.AutoPromote {
		return ""
	}
	return fmt.Sprintf(", or for the canaries to stay healthy for %s", spec.Update.CanaryHealthyTime.Std())
}
