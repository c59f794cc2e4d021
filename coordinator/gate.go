package coordinator

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/wallclock"
	"github.com/rollagent/rollagent/lockstep"
)

// Verdict is the gate's answer for the desired SHA.
type Verdict struct {
	Open   bool
	State  GateState
	Reason string // why it is closed, or "open"
	SHA    string
	Limit  int // K while the gate is open, 0 while closed: what a grant may use
	// MaxParallel is the policy's K, from the desired spec, open or closed,
	// as a number: a percentage (Policy) of Nodes as Amount.Of rounds it;
	// 0 only when there is no readable spec.
	MaxParallel int
	// Policy is update.max_parallel as the spec writes it, a count or a
	// percentage; zero when there is no readable spec.
	Policy hashspec.Amount
	// Nodes are the group's nodes that count (GroupState.NodeCount) at
	// this look, which a percentage is of; 0 under a count, which does not
	// depend on them (an agent's look reads only its own record then).
	Nodes int
	// Node is the state a node behind the desired SHA publishes while
	// the gate is closed (StateWaiting while it is open).
	Node NodeStatus
	// Opens says what opens a closed gate, for a node that keeps its slot
	// while down: a phrase (see Closed.Opens).
	Opens string
	// Hold: the gate is closed to new grants only; a node that holds its
	// slot goes on with its step (see Closed.Hold).
	Hold bool
	// Recheck is when the verdict may change by the clock alone (a
	// maintenance window opens or closes); zero when only a write to
	// Consul can change it. A node looks again by then.
	Recheck time.Time
	// Poll: Recheck is when to look again at what no write to Consul's KV
	// announces (a check's health), not when the gate opens.
	Poll bool
	// BeforeStep: a holder gives its slot back untouched if this verdict
	// stands right before its first step (see Closed.BeforeStep).
	BeforeStep bool
}

// GateState is the kind of verdict, for scripts and metrics; Reason says
// the same for a person, with the details.
type GateState string

// GateOpen is the state of an open gate; every other GateState is the
// State of a Rule.
const GateOpen GateState = "open"

// GateInput is what the gate is evaluated on: the group's state as read
// and the time of the look. Rules that need more of Consul than its KV
// (a check's health) get it here, read by whoever evaluates.
type GateInput struct {
	Group *GroupState
	Now   time.Time
	// Mono is the same moment on the evaluator's monotonic clock
	// (time.Now()), against which GroupState.Released is measured.
	// Optional, defaults to none: no time passed since the release.
	Mono time.Time
	// Node is the node whose gate is judged (a rule may hold some nodes
	// and not others: the canaries go first). Optional, defaults to
	// Group.For; "" judges the group as a whole (status, the exporter).
	Node string
}

// node is the node judged, see GateInput.Node.
func (in GateInput) node() string {
	if in.Node != "" || in.Group == nil {
		return in.Node
	}
	return in.Group.For
}

// A Rule is one reason the gate may be closed for the desired SHA. Rules
// are evaluated in the order of Rules; the first that closes the gate
// gives the verdict. A rule reads only what GateInput holds, so every
// agent, `status`, the stall diagnosis and the exporter reach the same
// verdict from the same state.
type Rule interface {
	// State is the GateState the rule closes the gate with.
	State() GateState
	// Close says why the gate is closed, or ok=false when the rule lets
	// it open.
	Close(in GateInput) (c Closed, ok bool)
}

// Closed is a rule's verdict on a gate it closes.
type Closed struct {
	Reason string
	// Node is the node state it shows; optional, defaults to StateWaiting.
	Node NodeStatus
	// Opens says what opens the gate again, as a phrase that ends in
	// "opens the gate"; optional, defaults to NewCommitOpens.
	Opens string
	// Hold closes the gate to new grants only, for a rule about when a
	// rollout may move (a maintenance window): a node that holds its slot
	// finishes its step. Optional, defaults to false: a rule about what
	// may run (a CANCEL) stops every step.
	Hold bool
	// Recheck is when the rule's answer may change by the clock alone;
	// optional, and read also from a rule that lets the gate open.
	Recheck time.Time
	// Poll says Recheck is only when to look again (see Verdict.Poll);
	// optional, defaults to false.
	Poll bool
	// BeforeStep has a holder judge the rule once more right before the
	// first step of its turn, for a hold that Consul cannot check in a
	// fence (the clock, a check's health): closed then, the node gives
	// its slot back untouched. Optional, defaults to false: a KeyRule's
	// fences check it, and a hold about order or spacing (after, last,
	// stagger) is not taken back from a node granted under it.
	BeforeStep bool
}

// NewCommitOpens is what opens any closed gate: a new SHA has a gate of
// its own.
const NewCommitOpens = "a new commit (`rollagent rollback`, say) opens a gate"

// KeyRule is a Rule whose closing is a key that exists, so it holds to the
// moment of the step, not only to the moment of the look: Consul checks
// the key in the transaction that grants a slot and in every fence (see
// Keys.Closing), or, for a brake, checks desired, which every writer of
// the brake moves in the same transaction (Keys.Brakes). The agent reads
// the keys with the rest of its group's records.
type KeyRule interface {
	Rule
	// Keys are the keys of group k whose existence closes the gate for sha.
	Keys(k Keys, sha string) []string
	// Brake says the keys are an operator's, which agents may not write:
	// Consul takes a check that a key is absent for a write of it.
	Brake() bool
}

// ReadingRule is a Rule whose verdict reads records besides the keys
// that close it (a KeyRule's, which the look reads anyway): an agent's
// look (ReadFor) reads, in the one transaction checked against desired,
// the keys every rule names with the few every verdict needs (lookKeys).
// A key no rule names is never seen by an agent.
type ReadingRule interface {
	Rule
	// ReadsKeys are the keys of group k the rule reads for sha; one that
	// ends in "/" is a folder, read with every key under it.
	ReadsKeys(k Keys, sha string) []string
}

// resolvingRule is a Rule whose records, once read, decode into the
// GroupState it judges (resolveDesired calls it for the desired SHA after
// the brakes and failures are decoded), so that its decoding lives in its
// own file beside the rule.
type resolvingRule interface {
	Rule
	resolve(g *GroupState, k Keys, sha string)
}

// Rules are the gate's rules, in the order they are evaluated. Adding a
// rule means a type in a file of its own, and a line here.
var Rules = []Rule{
	unreadableRule{},
	uncommittedRule{},
	specMissingRule{},
	cancelRule{},
	operatorPauseRule{},
	deadlineRule{},
	pauseRule{},
	failureBudgetRule{},
	// Before the holds: for a node that is not a canary it closes the gate
	// whole, not only to new grants.
	canaryRule{},
	// Holds last: a rule that stops every step wins over one that only
	// holds new grants. The stagger last of all: Diagnose takes a gate it
	// alone closes for open.
	windowRule{},
	blockRule{},
	afterRule{},
	lastRule{},
	staggerRule{},
}

// GateStates lists every GateState, for exporters that show each one.
var GateStates = gateStates(Rules)

func gateStates(rules []Rule) []GateState {
	out := []GateState{GateOpen}
	for _, r := range rules {
		if s := r.State(); s != GateOpen && !containsState(out, s) {
			out = append(out, s)
		}
	}
	return out
}

func containsState(ss []GateState, s GateState) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// Evaluate is the gate's verdict on in: whether a node behind the desired
// SHA may take a slot now. No process owns the decision.
func Evaluate(in GateInput) Verdict {
	g := in.Group
	v := Verdict{Node: StateWaiting}
	if g.Desired != nil {
		v.SHA = g.Desired.SHA
	}
	if g.Spec != nil {
		v.Policy = g.Spec.Update.MaxParallel
		if v.Policy.IsPercent() {
			v.Nodes = g.NodeCount()
		}
		v.MaxParallel = v.Policy.Of(v.Nodes)
	}
	for _, r := range Rules {
		c, closed := r.Close(in)
		if !c.Recheck.IsZero() && (v.Recheck.IsZero() || c.Recheck.Before(v.Recheck)) {
			v.Recheck = c.Recheck
		}
		if closed {
			v.State, v.Reason, v.Opens, v.Hold, v.Poll = r.State(), c.Reason, cmp.Or(c.Opens, NewCommitOpens), c.Hold, c.Poll
			v.BeforeStep = c.BeforeStep
			if c.Node != "" {
				v.Node = c.Node
			}
			return v
		}
	}
	v.Open, v.State, v.Reason, v.Limit = true, GateOpen, "open", v.MaxParallel
	return v
}

// Wait is the reason of a closed gate with, when the clock alone opens it
// (Recheck), how long until then, as of now: "…; the next opens Tue 02:00
// Europe/Berlin (in 3h12m)". Records keep Reason, which does not age.
func (v Verdict) Wait(now time.Time) string {
	if v.Open || v.Poll || v.Recheck.IsZero() || !v.Recheck.After(now) {
		return v.Reason
	}
	return v.Reason + " (in " + RoundWait(v.Recheck.Sub(now)) + ")"
}

// Gate is Evaluate of g now.
func (g *GroupState) Gate() Verdict {
	return Evaluate(GateInput{Group: g, Now: wallclock.Now(), Mono: time.Now()})
}

// closingKeys are the keys of the rules that close by a key, for sha: the
// brakes, or the others.
func closingKeys(k Keys, sha string, brakes bool) []string {
	var out []string
	for _, r := range Rules {
		if kr, ok := r.(KeyRule); ok && kr.Brake() == brakes {
			out = append(out, kr.Keys(k, sha)...)
		}
	}
	return out
}

// lookKeys are the keys an agent's look reads for sha and node besides
// desired and the slot: the desired spec, the node's own record and the
// membership mark a percentage's grant checks (what Evaluate itself and
// LockGate read), then every key the rules name (KeyRule.Keys and
// ReadingRule.ReadsKeys), once each; folders (a key ending in "/") apart.
func lookKeys(k Keys, sha, node string) (exact, trees []string) {
	keys := []string{k.History(sha), k.Node(node), k.Membership()}
	for _, r := range Rules {
		if kr, ok := r.(KeyRule); ok {
			keys = append(keys, kr.Keys(k, sha)...)
		}
		if rr, ok := r.(ReadingRule); ok {
			keys = append(keys, rr.ReadsKeys(k, sha)...)
		}
	}
	for _, key := range keys {
		switch {
		case slices.Contains(exact, key) || slices.Contains(trees, key):
		case strings.HasSuffix(key, "/"):
			trees = append(trees, key)
		default:
			exact = append(exact, key)
		}
	}
	return exact, trees
}

// LockGate is the lockstep gate for the desired SHA, checked by Consul in
// the transaction that grants the slot and in every fence.
func (g *GroupState) LockGate(k Keys) lockstep.Gate {
	v := g.Gate()
	lg := lockstep.Gate{DesiredKey: k.Desired(), DesiredIndex: g.DesiredPair.ModifyIndex,
		Closed: k.Closing(v.SHA), Brakes: k.Brakes(v.SHA), Limit: v.Limit, GrantChecks: g.membershipCheck(k)}
	if g.Spec != nil {
		lg.Stagger = g.Spec.Update.Stagger.Std()
		if p := g.Spec.Update.MaxParallelPer; p != nil {
			lg.PerDomain = p.Max
		}
	}
	return lg
}
