package agent

import (
	"slices"

	"github.com/rollagent/rollagent/coordinator"
)

// maintOwner is whose a service's maintenance is, as this agent tells it.
type maintOwner int

const (
	maintNone   maintOwner = iota // not in maintenance
	maintOurs                     // in maintenance with the reason this agent recorded
	maintOthers                   // in maintenance with another reason (an operator's `consul maint`): left alone
)

// ownerOf says whose the maintenance of a service is: reasons are the
// local Consul agent's maintenance reasons by service ID, ours the reason
// this agent recorded setting ("" when it recorded none).
func ownerOf(reasons map[string]string, id, ours string) maintOwner {
	reason, on := reasons[id]
	switch {
	case !on:
		return maintNone
	case ours != "" && reason == ours:
		return maintOurs
	}
	return maintOthers
}

// drainPlan is what a drain does before the first destructive step.
type drainPlan struct {
	// set are the instances to put into maintenance, kept those already
	// in it with the reason recorded (an earlier turn's, or a crashed
	// agent's): both are recorded, to be lifted.
	set, kept []coordinator.DrainedService
	// others are instances in someone else's maintenance: neither set nor
	// recorded, so never lifted by the agent.
	others []coordinator.DrainedService
	// missing are the names with no instance on the node.
	missing []string
}

// planDrain plans draining names, given the local Consul agent's instances
// of them (IDs by name) and its maintenance reasons by service ID; reason
// is the one this drain sets, the one recorded if there is one.
func planDrain(names []string, local map[string][]string, reasons map[string]string, reason string) drainPlan {
	var p drainPlan
	for _, name := range names {
		ids := local[name]
		if len(ids) == 0 {
			p.missing = append(p.missing, name)
		}
		for _, id := range ids {
			s := coordinator.DrainedService{ID: id, Name: name}
			switch ownerOf(reasons, id, reason) {
			case maintNone:
				p.set = append(p.set, s)
			case maintOurs:
				p.kept = append(p.kept, s)
			case maintOthers:
				p.others = append(p.others, s)
			}
		}
	}
	return p
}

// drained says whether the plan drains anything: only then is the delay
// waited.
func (p drainPlan) drained() bool { return len(p.set)+len(p.kept) > 0 }

// record is what the node's record carries of the plan, before any is set.
func (p drainPlan) record(d coordinator.Drained) *coordinator.Drained {
	d.Services = slices.Concat(p.kept, p.set)
	d.Missing = p.missing
	return &d
}

// liftPlan splits a recorded drain by what the local Consul agent shows
// now: lift those still in maintenance with the recorded reason; leave
// those in another's (set since by an operator, who lifts it); those in
// none are lifted already (by hand, say) and need nothing.
func liftPlan(d *coordinator.Drained, reasons map[string]string) (lift, left []coordinator.DrainedService) {
	if d == nil {
		return nil, nil
	}
	for _, s := range d.Services {
		switch ownerOf(reasons, s.ID, d.Reason) {
		case maintOurs:
			lift = append(lift, s)
		case maintOthers:
			left = append(left, s)
		}
	}
	return lift, left
}

// drainEnd is the moment a drain may be lifted at.
type drainEnd int

const (
	// drainLook: a look at the node outside any turn (after a restart, a
	// crash, a turn whose lift failed).
	drainLook drainEnd = iota
	// drainConverged: the new workload passed min_healthy_time.
	drainConverged
	// drainUndone: a failed replacement restored the old workload.
	drainUndone
	// drainRefused: the step after the drain was refused (a CANCEL, an
	// operator's pause, the slot lost) or the agent stops: the old
	// workload is untouched.
	drainRefused
)

// liftNow says whether the drain recorded (recorded) is lifted at end,
// with the node's workload healthy or not, and its slot claimed or not.
// The node stays drained while its workload is not back healthy, and a
// look leaves it to the turn that holds the node's slot.
func liftNow(end drainEnd, recorded, healthy, claimed bool) bool {
	if !recorded {
		return false
	}
	switch end {
	case drainConverged, drainRefused:
		return true
	case drainUndone:
		return healthy
	}
	return healthy && !claimed
}
