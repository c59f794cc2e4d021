package coordinator

// NodeStatus is where a node stands, as its agent publishes it under
// nodes/<node>. It is its own type so that a state cannot be mixed up with
// the SHAs, reasons and errors carried next to it; its JSON is the plain
// string, so the KV layout does not change.
type NodeStatus string

// Node states published under nodes/<node>.
const (
	StateConverged NodeStatus = "converged"
	StateWaiting   NodeStatus = "waiting"
	StateReplacing NodeStatus = "replacing"
	StateVerifying NodeStatus = "verifying"
	StateFailed    NodeStatus = "failed"
	StateCancelled NodeStatus = "cancelled"
	StatePaused    NodeStatus = "paused"
	StateUnknown   NodeStatus = "unknown" // the agent could not read its workload
	// StateDown: the node runs the desired SHA, verified when it converged,
	// and its workload is down now (by a sustained signal): it counts
	// against max_parallel until it is healthy again.
	StateDown NodeStatus = "down"
)

// Valid reports whether s is one of the states above. A record decodes any
// string into a NodeStatus; check uses this to refuse one written by
// someone else rather than act on it.
func (s NodeStatus) Valid() bool {
	switch s {
	case StateConverged, StateWaiting, StateReplacing, StateVerifying,
		StateFailed, StateCancelled, StatePaused, StateUnknown, StateDown:
		return true
	}
	return false
}

// Verified says the node's agent saw the workload of its record's SHA
// through min_healthy_time: converged, or down since.
func (s NodeStatus) Verified() bool { return s == StateConverged || s == StateDown }

// Waits says the node stands still before a step of its own: waiting,
// paused or cancelled. Its record names the gate it waits on, if closed.
func (s NodeStatus) Waits() bool {
	return s == StateWaiting || s == StatePaused || s == StateCancelled
}
