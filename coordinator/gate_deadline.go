package coordinator

// GateDeadlinePassed: the progress deadline of the desired commit passed
// under failure_action=pause (update.progress_deadline).
const GateDeadlinePassed GateState = "deadline_passed"

// deadlineRule closes the gate while the pause a progress deadline made
// stands. It comes before pauseRule, which closes on the same record: the
// state says why it was paused. Consul holds it to the step through that
// rule's key (pause/<sha>), which the deadline's transaction writes, and
// `rollagent resume` lifts it as it lifts a failure pause; the deadline's
// record stays, so it does not pass again for the same commit.
type deadlineRule struct{}

func (deadlineRule) State() GateState { return GateDeadlinePassed }

func (deadlineRule) Close(in GateInput) (Closed, bool) {
	p := in.Group.Pause
	if p == nil || p.Cause != CauseProgressDeadline {
		return Closed{}, false
	}
	return Closed{Reason: "deadline passed: " + p.Reason, Node: StatePaused, Opens: resumeOpens}, true
}

// ReadsKeys is the deadline's record, which says it passed for this
// commit already (GroupState.Deadline): an agent does not fire it twice.
func (deadlineRule) ReadsKeys(k Keys, sha string) []string { return []string{k.Deadline(sha)} }

func (deadlineRule) resolve(g *GroupState, k Keys, _ string) { g.Deadline = g.deadlineOf(k) }
