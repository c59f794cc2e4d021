package coordinator

// unreadableRule closes the gate while the desired record does not
// decode: no SHA to move to can be trusted.
type unreadableRule struct{}

// GateUnreadable: the desired record does not decode.
const GateUnreadable GateState = "unreadable"

func (unreadableRule) State() GateState { return GateUnreadable }

func (unreadableRule) Close(in GateInput) (Closed, bool) {
	if !in.Group.DesiredUnreadable() {
		return Closed{}, false
	}
	return Closed{Reason: "the desired record is unreadable (see problems)"}, true
}

// uncommittedRule closes the gate of a group with nothing committed.
type uncommittedRule struct{}

// GateUncommitted: nothing committed.
const GateUncommitted GateState = "uncommitted"

func (uncommittedRule) State() GateState { return GateUncommitted }

func (uncommittedRule) Close(in GateInput) (Closed, bool) {
	if in.Group.Desired != nil {
		return Closed{}, false
	}
	return Closed{Reason: "nothing committed"}, true
}

// specMissingRule closes the gate while the desired SHA's spec is not in
// history (never committed there, or one the reader may not read): a
// node has nothing to run.
type specMissingRule struct{}

// GateSpecMissing: the desired SHA has no spec in history.
const GateSpecMissing GateState = "spec_missing"

func (specMissingRule) State() GateState { return GateSpecMissing }

func (specMissingRule) Close(in GateInput) (Closed, bool) {
	if in.Group.Spec != nil {
		return Closed{}, false
	}
	return Closed{Reason: "desired spec is missing from history"}, true
}
