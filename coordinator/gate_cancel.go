package coordinator

// cancelRule closes the gate for good for a SHA with a CANCEL record: only
// a new commit, a new SHA, moves the group again.
type cancelRule struct{}

// GateCancelled: a CANCEL exists for the desired SHA.
const GateCancelled GateState = "cancelled"

func (cancelRule) State() GateState { return GateCancelled }

func (cancelRule) Keys(k Keys, sha string) []string { return []string{k.Cancel(sha)} }

func (cancelRule) Close(in GateInput) (Closed, bool) {
	if in.Group.Cancel == nil {
		return Closed{}, false
	}
	return Closed{Reason: in.Group.Cancel.describe(), Node: StateCancelled,
		Opens: NewCommitOpens}, true
}
