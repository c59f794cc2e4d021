package coordinator

import (
	"fmt"
	"time"

	"github.com/rollagent/rollagent/hashspec"
)

// GatePaused: an operator paused the group (`rollagent pause`), or failures
// paused the desired SHA under failure_action=pause.
const GatePaused GateState = "paused"

// resumeOpens is what lifts a failure pause.
const resumeOpens = "`rollagent resume`, or a new commit, opens the gate"

// operatorPauseRule closes the gate while an operator's pause of the group
// (`rollagent pause`) exists, whatever SHA is desired: a brake only an
// operator's token can set or lift, and only `rollagent resume` lifts.
type operatorPauseRule struct{}

func (operatorPauseRule) State() GateState { return GatePaused }

func (operatorPauseRule) Keys(k Keys, sha string) []string {
	return []string{k.OperatorPause(), k.LegacyOperatorPause(sha)}
}

func (operatorPauseRule) Brake() bool { return true }

func (operatorPauseRule) Close(in GateInput) (Closed, bool) {
	p := in.Group.OperatorPause
	if p == nil {
		return Closed{}, false
	}
	reason := p.Describe()
	if d := in.Group.Desired; d != nil && p.SHA != "" && p.SHA != d.SHA {
		reason += fmt.Sprintf(" (since %s, when %s was desired; commits since do not lift it)",
			p.At.UTC().Format(time.RFC3339), ShortSHA(p.SHA))
	} else if !p.At.IsZero() {
		reason += fmt.Sprintf(" (since %s)", p.At.UTC().Format(time.RFC3339))
	}
	return Closed{Reason: reason, Node: StatePaused, Opens: "`rollagent resume` opens the gate"}, true
}

// pauseRule closes the gate while a pause record exists for the desired
// SHA: the failure that reached max_failures under failure_action=pause
// wrote it.
type pauseRule struct{}

func (pauseRule) State() GateState { return GatePaused }

func (pauseRule) Keys(k Keys, sha string) []string { return []string{k.Pause(sha)} }

// Brake is false: agents write the failure pause.
func (pauseRule) Brake() bool { return false }

func (pauseRule) Close(in GateInput) (Closed, bool) {
	p := in.Group.Pause
	if p == nil {
		return Closed{}, false
	}
	return Closed{Reason: fmt.Sprintf("paused after %d failure(s): %s", p.Failures, p.Reason),
		Node: StatePaused, Opens: resumeOpens}, true
}

// failureBudgetRule closes the gate once the desired SHA's failures reach
// max_failures under failure_action=pause, before (or without) the pause
// record: the count, not the record, is what the policy is about.
type failureBudgetRule struct{}

func (failureBudgetRule) State() GateState { return GatePaused }

// ReadsKeys are the failures of sha, which the budget counts.
func (failureBudgetRule) ReadsKeys(k Keys, sha string) []string {
	return []string{k.FailuresPrefix(sha)}
}

func (failureBudgetRule) Close(in GateInput) (Closed, bool) {
	g := in.Group
	u := g.Spec.Update
	if u.FailureAction != hashspec.FailurePause || len(g.Failures) < g.MaxFailures() {
		return Closed{}, false
	}
	return Closed{Reason: fmt.Sprintf("paused: %d failure(s) reached max_failures=%s", len(g.Failures), maxFailuresText(g)),
		Node: StatePaused, Opens: resumeOpens}, true
}
