package agent

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/rollagent/rollagent/coordinator"
)

// drainReason is the start of the maintenance reason of every drain by
// the agent of node in group: what tells a maintenance of its own apart
// when no record of it is left (strayDrains).
func drainReason(group, node string) string {
	return fmt.Sprintf("rollagent: %s/%s drained", group, node)
}

// strayDrains are the service IDs in the local Consul agent's maintenance
// (reasons, by ID) with a reason of a drain by the agent of node in group
// (drainReason), sorted: with no drain recorded, a drain whose record is
// gone, as `node rm --force` of a drained node leaves it. Any other
// reason, an operator's or another node's, is not one of them.
func strayDrains(reasons map[string]string, group, node string) []string {
	prefix := drainReason(group, node)
	var ids []string
	for id, r := range reasons {
		if r == prefix || strings.HasPrefix(r, prefix+" ") {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// liftStrays lifts, once per process, the drains of this node that no
// record holds any more (strayDrains), at a look with none recorded, the
// workload healthy and no slot claimed: when a recorded drain would be
// lifted (liftNow). Only an agent started after its record was removed
// can meet one: a running agent keeps its drain in memory and lifts it.
// A read that fails for a while (an outage) is tried again at the next
// look; one refused for good is not, as every look would be refused.
func (a *Agent) liftStrays(ctx context.Context, end drainEnd, healthy, claimed bool) {
	if a.straysChecked || !liftNow(end, true, healthy, claimed) || end != drainLook {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), drainCallTimeout)
	defer cancel()
	reasons, err := a.cfg.Store.Maintenance(ctx)
	if err != nil {
		a.straysChecked = !coordinator.IsTransient(err)
		a.log.Debug("cannot read the local Consul agent's maintenance for a drain left unrecorded", "error", err)
		return
	}
	for _, id := range strayDrains(reasons, a.cfg.Group, a.cfg.Node) {
		if err := a.cfg.Store.LiftMaintenance(ctx, id); err != nil {
			a.log.Warn("cannot lift a drain left unrecorded yet; the next look tries again", "service", id, "error", err)
			return
		}
		a.log.Info("drain lifted: a maintenance of this node's with no record left of it (its record removed by node rm)",
			"service", id, "reason", reasons[id])
	}
	a.straysChecked = true
}
