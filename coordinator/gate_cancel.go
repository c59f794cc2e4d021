package coordinator

// cancelRule closes the gate for good for a SHA with a CANCEL record: only
// a new commit, a new SHA, moves the group again.
type cancelRule struct{}

// GateCancelled: a CANCEL exists for the desired SHA.
const GateCancelled GateState = "cancelled"

func (cancelRule) State() GateState { return GateCancelled }

// Keys are the CANCEL and where one was written before brakes/ existed.
func (cancelRule) Keys(k Keys, sha string) []string {
	return []string{k.Cancel(sha), k.LegacyCancel(sha)}
}

func (cancelRule) Brake() bool { return true }

func (cancelRule) Close(in GateInput) (Closed, bool) {
	if in.Group.Cancel == nil {
		return Closed{}, false
	}
	return Closed{Reason: in.Group.Cancel.describe(), Node: StateCancelled,
		Opens: NewCommitOpens}, true
}
