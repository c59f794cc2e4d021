package coordinator

import (
	"fmt"
	"strings"
	"time"
)

// GateAwaitingPromotion: the desired spec has canaries (update.canary),
// and the rollout is not promoted past them: the other nodes wait.
const GateAwaitingPromotion GateState = "awaiting_promotion"

// CanaryRecheck is how often a node held for auto-promotion looks again:
// a canary's record or health changing wakes no other agent, and the
// healthy time is judged from the evaluator's own looks, so a canary down
// for less than this between two looks can go unseen by it (its own
// agent's failure record, once healthy_deadline passes, is seen by all).
const CanaryRecheck = 5 * time.Second

// canaryRule holds every node but the canaries until the rollout is
// promoted: by an operator's record (`rollagent promote`, Keys.Promoted,
// which no agent's token may write), or, with update.auto_promote, once
// the evaluator has seen every canary healthy for canary_healthy_time on
// its own monotonic clock (GroupState.CanarySeen). Auto-promotion is that
// judgement, made at each look, and no record: no agent has to be trusted
// to write one, and a canary that falls over afterwards holds the rest
// again until it has been healthy that long anew.
//
// It is a hold for the group (the canaries go on) and closes the gate
// outright for a node that is not a canary; it comes after the brakes in
// Rules: under a CANCEL or a pause the
// brake is the verdict, a promotion or not, and the canaries' clock
// counts only while no brake is on (canaryHealthy), so neither ever
// promotes; after a resume the canaries must stay healthy the whole time
// again.
//
// For a node (GateInput.Node), it closes unless the node is a canary. For
// the group (status, the exporter), it closes once no canary is behind
// while another node is: that is when the rollout waits on a promotion.
type canaryRule struct{}

func (canaryRule) State() GateState { return GateAwaitingPromotion }

// ReadsKeys are the canaries, the operator's promotion, and the mark that
// sha converged, which an automatic rollback's promotion rests on.
func (canaryRule) ReadsKeys(k Keys, sha string) []string {
	return []string{k.Canaries(sha), k.Promoted(sha), k.Converged(sha)}
}

func (canaryRule) resolve(g *GroupState, k Keys, sha string) {
	if p := g.byKey[k.Canaries(sha)]; p != nil {
		var c Canaries
		if g.note(decode(p.Key, p.Value, &c)) && c.SHA == sha {
			g.Canaries = &c
		}
	}
	// A promotion counts only as written: garbage there must not pass
	// for one, nor one of another SHA.
	if p := g.byKey[k.Promoted(sha)]; p != nil {
		var pr Promotion
		if g.note(decode(p.Key, p.Value, &pr)) && pr.SHA == sha {
			g.Promoted, g.promotionRecorded = &pr, true
		}
	}
	if g.Promoted == nil {
		g.Promoted = g.autoRollbackPromotion(k)
	}
	for _, n := range g.Nodes {
		if g.Canaries.Has(n.Node) {
			g.CanaryNodes = append(g.CanaryNodes, n)
		}
	}
}

func (canaryRule) Close(in GateInput) (Closed, bool) {
	g := in.Group
	if g.Spec == nil || g.Spec.Update.Canary == 0 || g.Desired == nil || g.Promoted != nil {
		return Closed{}, false
	}
	u := g.Spec.Update
	// For a node that is not a canary the gate is closed, not a hold: a
	// slot it holds from before the commit (a step a commit interrupted)
	// must not carry it to the new SHA ahead of the canaries. For the
	// group it is a hold: the canaries finish their steps.
	node := in.node()
	c := Closed{Hold: node == "", Opens: "`rollagent promote " + g.Group + "` opens the gate"}
	if g.Canaries == nil {
		c.Reason = "awaiting promotion: no canary record for " + ShortSHA(g.Desired.SHA)
		return c, true
	}
	if len(g.Canaries.Nodes) == 0 {
		return Closed{}, false // no node ran an older SHA at the commit
	}
	if u.AutoPromote {
		c.Opens = fmt.Sprintf("the canaries healthy for %s, or `rollagent promote %s`, opens the gate", RoundWait(u.CanaryHealthyTime.Std()), g.Group)
		left := u.CanaryHealthyTime.Std()
		if at := g.CanarySeen.At; !at.IsZero() && !in.Mono.IsZero() {
			left -= max(in.Mono.Sub(at), 0)
		}
		if !g.CanarySeen.At.IsZero() && left <= 0 {
			return Closed{}, false
		}
		c.Recheck, c.Poll = in.Now.Add(min(left, CanaryRecheck)), g.CanarySeen.At.IsZero() || left > CanaryRecheck
	}
	switch {
	case node != "" && g.Canaries.Has(node):
		return Closed{}, false
	case node == "" && (g.canariesBehind() || !g.behind()):
		return Closed{}, false
	case node == "" && u.AutoPromote && g.othersMoved():
		// A reader of the group that started after the agents promoted
		// (status) has not seen the canaries healthy that long; a node
		// that is not a canary on its way to the SHA says they had.
		return Closed{}, false
	}
	c.Reason = "awaiting promotion: canaries " + strings.Join(g.Canaries.Nodes, ", ")
	if u.AutoPromote {
		c.Reason += fmt.Sprintf(" (auto-promote once healthy for %s)", RoundWait(u.CanaryHealthyTime.Std()))
	}
	return c, true
}

// canariesBehind says some canary has not converged on the desired SHA,
// or has no record.
func (g *GroupState) canariesBehind() bool {
	for _, name := range g.Canaries.Nodes {
		converged := false
		for i := range g.CanaryNodes {
			if n := &g.CanaryNodes[i]; n.Node == name {
				converged = standing(g.Desired, n) == StandingConverged
			}
		}
		if !converged {
			return true
		}
	}
	return false
}

// othersMoved says a node that is not a canary replaces, verifies or runs
// the desired SHA: only an auto-promotion lets one move.
func (g *GroupState) othersMoved() bool {
	for i := range g.Nodes {
		n := &g.Nodes[i]
		if g.Canaries.Has(n.Node) {
			continue
		}
		switch standing(g.Desired, n) {
		case StandingConverged:
			return true
		case StandingReplacing, StandingVerifying:
			if n.Desired == g.Desired.SHA {
				return true
			}
		}
	}
	return false
}
