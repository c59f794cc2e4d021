// Package agent is the per-node loop behind `rollagent run`: it watches the
// group's desired spec, publishes this node's state, and when its SHA is
// behind it takes a slot through lockstep, fences each destructive step,
// replaces the workload through a runtime (Docker or an exec hook), waits for
// it to be healthy and releases the slot.
package agent
