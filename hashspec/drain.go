package hashspec

import (
	"slices"
	"time"
)

// Drain takes a node out of its load balancers' and DNS's answers before
// its old workload stops: the node's agent puts Services, as registered on
// its local Consul agent, into Consul's maintenance mode and waits Delay
// (Nomad's shutdown_delay) before the first destructive step, and lifts
// the maintenance once the new workload has passed min_healthy_time.
type Drain struct {
	// Services are Consul service names on the node's own Consul agent;
	// each instance of each name is drained. At least one.
	Services []string `json:"services"`
	// Delay is how long the agent waits, with the services in maintenance,
	// before the old workload stops; optional, defaults to none.
	Delay Duration `json:"delay,omitempty"`
}

// Drain limits: a delay is spent under the node's slot, so it is part of
// the claim's lease, and bounded well below the lease's other terms.
const (
	MaxDrainDelay    = Duration(time.Hour)
	MaxDrainServices = 64
)

const (
	pathDrain         = "update.drain"
	pathDrainServices = pathDrain + ".services"
)

// normalDrain sorts the services and drops repeats, so specs that name
// the same services in any order share a SHA.
func normalDrain(d *Drain) *Drain {
	if d == nil {
		return nil
	}
	out := &Drain{Services: slices.Compact(slices.Sorted(slices.Values(d.Services))), Delay: d.Delay}
	if len(out.Services) == 0 {
		out.Services = nil
	}
	return out
}

func (c *checker) drain(d *Drain) {
	if d == nil {
		return
	}
	switch n := len(d.Services); {
	case n == 0:
		c.add(pathDrainServices, "needs at least one Consul service name")
	case n > MaxDrainServices:
		c.add(pathDrainServices, "must name at most %d services, got %d", MaxDrainServices, n)
	}
	for i, s := range d.Services {
		if s == "" {
			c.add(indexPath(pathDrainServices, i), "must not be empty")
			continue
		}
		c.blockName(indexPath(pathDrainServices, i), s)
	}
	if d.Delay < 0 || d.Delay > MaxDrainDelay {
		c.add(pathDrain+".delay", "must be at least 0s and at most %s, got %s", MaxDrainDelay, d.Delay)
	}
}
