package integration

import (
	"fmt"
	"sort"
	"time"

	"github.com/rollagent/rollagent/coordinator"
)

// aroundWindow is how long before a gate closes and after it opens the
// report counts grants: how much the rollout moved around each closing.
const aroundWindow = 15 * time.Second

// span is a stretch of Consul indexes over which the gate was closed: by
// an operator's pause for its group, by a brake for one SHA (a failure
// pause, a cancel), or by the gate check for every SHA the nemesis
// committed (each blocks on it). to is 0 while it never ended.
type span struct {
	what       string
	group      string // "" for the gate check: every group
	sha        string // "" for every SHA of group
	check      bool   // the gate check's
	from, to   uint64
	fromAt     time.Time
	toAt       time.Time
	byOperator bool // an operator's pause (the nemesis')
	byFailures bool // a pause the failures of the SHA made
}

// judgeGate is invariant (f): no grant while the gate is closed, judged
// from Consul's indexes alone.
//
//   - An operator's pause closes the gate for its group, whatever is
//     committed, from its event's CreateIndex, the index of the
//     transaction that wrote it and moved desired, to the next resume's.
//     A failure pause (its key Consul checks in the grant itself) closes
//     it for its SHA until the next resume or commit of that SHA (see
//     lifts), a cancel for its SHA for good. A grant they cover at an
//     index in between is a violation: the grant's transaction checked
//     desired at the index it decided on, so it decided after the brake.
//   - The gate check, which every nemesis commit blocks on, is critical
//     from the index of its flip to critical (the check's ModifyIndex, as
//     Consul's health API shows it) to the index of its flip back. A
//     grant of a nemesis SHA at an index in between is a violation unless
//     the record the grant wrote shows that its agent's health read right
//     before the grant (health_index, the read's X-Consul-Index) came
//     before the flip: that read saw no change after its index, so the
//     flip landed between the read and the grant's transaction, the one
//     round trip that is the hold's real window (docs/gate.md). Such a
//     grant is counted as having raced the flip; a grant whose record the
//     watch did not see is a violation, as nothing shows it raced.
//
// It returns the summary of the report's line.
func (n *nemesis) judgeGate() string {
	w := n.gw
	spans := n.brakeSpans()
	brakes := len(spans)
	spans = append(spans, w.checkSpans()...)
	w.mu.Lock()
	grants := make([]*grantSeen, 0, len(w.grants))
	for _, g := range w.grants {
		grants = append(grants, g)
	}
	w.mu.Unlock()
	sort.Slice(grants, func(i, j int) bool { return grants[i].index < grants[j].index })
	raced, inside, unknown := 0, 0, 0
	for _, g := range grants {
		if g.sha == "" {
			if ns, ok := w.record(g); ok {
				g.sha = ns.Desired
			}
		}
		if g.sha == "" {
			unknown++ // neither its claim nor its record was seen: not judged
			n.note("grant to %s of %s at index %d: its SHA was not seen, not judged", g.node, g.group, g.index)
			continue
		}
		for _, s := range spans {
			r, bad := n.judgeGrant(g, s)
			raced += r
			inside += bad
		}
	}
	return n.gateSummary(spans[:brakes], spans[brakes:], grants, raced, inside) + fmt.Sprintf(", %d not judged (SHA not seen)", unknown)
}

// judgeGrant judges one grant against one span: it returns 1, 0 when it
// raced a check flip, 0, 1 when it is a violation.
func (n *nemesis) judgeGrant(g *grantSeen, s span) (raced, bad int) {
	n.mu.Lock()
	ours := n.committed[g.sha]
	n.mu.Unlock()
	ns, seen := n.gw.record(g)
	v, why := judgeGrant(g, s, ours, ns, seen)
	where := fmt.Sprintf("grant of %s to %s of %s at index %d", coordinator.ShortSHA(g.sha), g.node, g.group, g.index)
	switch v {
	case grantRaced:
		n.note("%s raced the gate check's flip at index %d: %s", where, s.from, why)
		return 1, 0
	case grantInside:
		n.violate("f "+g.group+" "+s.what, "(f) %s, inside the %s (index %d to %d): %s", where, s.what, s.from, s.to, why)
		return 0, 1
	}
	return 0, 0
}

// grantVerdict is what one span says of one grant.
type grantVerdict int

const (
	grantOutside grantVerdict = iota // the span does not cover the grant
	grantRaced                       // a check flip landed between the grant's health read and its transaction
	grantInside                      // a grant while the gate was closed: a violation
)

// judgeGrant is the pure part of (f) for one grant and one span: ours says
// the grant's SHA is a nemesis commit (it blocks on the gate check), rec
// is the node record the grant wrote, if seen.
func judgeGrant(g *grantSeen, s span, ours bool, rec coordinator.NodeState, seen bool) (grantVerdict, string) {
	switch {
	case g.index <= s.from || (s.to != 0 && g.index >= s.to):
		return grantOutside, ""
	case s.group != "" && s.group != g.group, s.sha != "" && s.sha != g.sha:
		return grantOutside, ""
	case !s.check:
		return grantInside, "the grant's transaction checked desired at an index after the brake's"
	case !ours:
		return grantOutside, "" // a SHA from before the run, which blocks on nothing
	case !seen:
		return grantInside, "the record the grant wrote was not seen: nothing shows its health read came before the flip"
	case rec.HealthIndex > 0 && rec.HealthIndex < s.from:
		return grantRaced, fmt.Sprintf("its health read was at index %d", rec.HealthIndex)
	}
	return grantInside, fmt.Sprintf("its health read was at index %d, which saw the flip", rec.HealthIndex)
}

// brakeSpans reads each group's event log: every pause and cancel, and
// what ended it.
func (n *nemesis) brakeSpans() []span {
	var out []span
	for _, g := range nemesisGroups() {
		ctx, cancel := n.c.ctx()
		log, err := n.c.store().Events(ctx, g)
		cancel()
		if err != nil {
			n.violate("f events "+g, "(f) cannot read the event log of %s to judge its brakes: %v", g, err)
			continue
		}
		for i, e := range log.Events {
			if (e.Kind != coordinator.EventPause && e.Kind != coordinator.EventCancel) || e.CreateIndex < n.gateStart {
				continue // not a brake, or an earlier seed's
			}
			operator := e.Kind == coordinator.EventPause && e.Writer.Kind == coordinator.WriterOperator
			s := span{what: fmt.Sprintf("%s of %s by %s", e.Kind, coordinator.ShortSHA(e.SHA), e.By), group: g, sha: e.SHA,
				from: e.CreateIndex, fromAt: e.At, byOperator: operator, byFailures: e.Kind == coordinator.EventPause && !operator}
			if operator {
				s.sha = "" // the group's, whatever is committed while it holds
			}
			for _, later := range log.Events[i+1:] {
				if e.Kind == coordinator.EventPause && lifts(e.SHA, operator, later) {
					s.to, s.toAt = later.CreateIndex, later.At
					break
				}
			}
			out = append(out, s)
		}
	}
	return out
}

// lifts says whether e may end a pause of sha: a resume of the group (of
// whichever SHA: a resume lifts every pause it can), or, for a failure
// pause, a commit of sha. A span ended too early judges fewer grants,
// never a grant the gate let through.
func lifts(sha string, operator bool, e coordinator.LoggedEvent) bool {
	switch e.Kind {
	case coordinator.EventResume:
		return true
	case coordinator.EventCommit, coordinator.EventRollback, coordinator.EventAutoRollback:
		return !operator && e.SHA == sha
	}
	return false
}

// checkSpans are the stretches over which the gate check was critical.
func (w *gateWatch) checkSpans() []span {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []span
	for i, f := range w.flips {
		if !f.critical {
			continue
		}
		s := span{what: "gate check critical", check: true, from: f.index, fromAt: f.at}
		if i+1 < len(w.flips) {
			s.to, s.toAt = w.flips[i+1].index, w.flips[i+1].at
		}
		out = append(out, s)
	}
	return out
}

// gateSummary counts the closings and the grants around them.
func (n *nemesis) gateSummary(brakes, checks []span, grants []*grantSeen, raced, inside int) string {
	var pauses, failPauses, cancels, resumed int
	for _, s := range brakes {
		switch {
		case s.byOperator:
			pauses++
		case s.byFailures:
			failPauses++
		default:
			cancels++
		}
		if s.byOperator && s.to != 0 {
			resumed++
		}
	}
	n.mu.Lock()
	calls := fmt.Sprintf("pause calls %d, resume calls %d", n.pauseCalls, n.resumeCalls)
	n.mu.Unlock()
	before, after := 0, 0
	for _, g := range grants {
		for _, s := range append(append([]span{}, brakes...), checks...) {
			if !s.fromAt.IsZero() && g.at.Before(s.fromAt) && s.fromAt.Sub(g.at) <= aroundWindow {
				before++
				break
			}
		}
		for _, s := range append(append([]span{}, brakes...), checks...) {
			if !s.toAt.IsZero() && g.at.After(s.toAt) && g.at.Sub(s.toAt) <= aroundWindow {
				after++
				break
			}
		}
	}
	return fmt.Sprintf("gate: %s; %d operator pauses (%d lifted), %d failure pauses, %d cancels, %d check flips to critical; "+
		"%d grants, %d within %s before a closing, %d within %s after an opening, %d raced a check flip, %d inside a closed gate",
		calls, pauses, resumed, failPauses, cancels, len(checks), len(grants), before, aroundWindow, after, aroundWindow, raced, inside)
}
