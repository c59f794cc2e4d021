package agent

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/wallclock"
	"github.com/rollagent/rollagent/lockstep"
)

// drainCallTimeout bounds each of a drain's bounded calls to the local
// Consul agent (drainCalls of them), and a lift's calls together.
const drainCallTimeout = 10 * time.Second

// drainCalls is how many calls of drainCallTimeout each a drain makes
// under the slot: its plan (planDrain), its maintenance (SetMaintenance)
// and its wait for the catalog (drainSeen). The lease counts them all.
const drainCalls = 3

// drainStep is the name of the fenced step that records a drain.
const drainStep = "drain"

// drain puts the node's services that update.drain names into Consul's
// maintenance and waits its delay, right before the turn's first
// destructive step. What it sets is in the node's record before it sets
// any: the fence of a step of its own writes it, so a CANCEL stops a drain
// too. A drain that fails has touched nothing of the workload: what it set
// is lifted.
func (t *turn) drain(ctx context.Context) (err error) {
	a, d := t.a, t.gs.Spec.Update.Drain
	defer func() {
		if err != nil {
			a.undrain(ctx, drainRefused, false, true)
		}
	}()
	p, rec, err := a.planDrain(ctx, d.Services)
	if err != nil {
		return fmt.Errorf("%w: %w", errDrain, err)
	}
	for _, s := range p.others {
		a.log.Warn("drain: service already in maintenance by someone else; left as it is, for them to lift", "service", s.Name, "id", s.ID)
	}
	if len(p.missing) > 0 {
		a.log.Warn("drain: "+missingNote(p.missing), "services", p.missing)
	}
	if !p.drained() && len(p.missing) == 0 {
		return nil
	}
	a.pub.setDrain(rec)
	if err := t.step(ctx, t.l.SHA, drainStep); err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, drainCallTimeout)
	defer cancel()
	for _, s := range p.set {
		if err := a.cfg.Store.SetMaintenance(sctx, s.ID, rec.Reason); err != nil {
			return fmt.Errorf("%w: service %s: %w", errDrain, s.ID, err)
		}
	}
	if !p.drained() {
		return nil
	}
	if err := a.drainSeen(ctx, rec); err != nil {
		return err
	}
	a.log.Info("drained: services in maintenance", "services", serviceIDs(rec.Services), "delay", d.Delay)
	return t.drainDelay(d.Delay.Std())
}

// planDrain reads the local Consul agent's instances of names and their
// maintenance, and plans a drain with the reason of the drain recorded, if
// any (a crashed agent's, or this one's that a fence cut short), so that
// what it set counts as set.
func (a *Agent) planDrain(ctx context.Context, names []string) (drainPlan, *coordinator.Drained, error) {
	ctx, cancel := context.WithTimeout(ctx, drainCallTimeout)
	defer cancel()
	local, err := a.cfg.Store.LocalServices(ctx, names)
	if err != nil {
		return drainPlan{}, nil, err
	}
	reasons, err := a.cfg.Store.Maintenance(ctx)
	if err != nil {
		return drainPlan{}, nil, err
	}
	now := wallclock.Now().UTC()
	rec := coordinator.Drained{At: now,
		Reason: fmt.Sprintf("%s to replace its workload (%s)", drainReason(a.cfg.Group, a.cfg.Node), now.Format(time.RFC3339Nano))}
	if prev := a.pub.drain(); prev != nil {
		rec.Reason, rec.At = prev.Reason, prev.At
	}
	p := planDrain(names, local, reasons, rec.Reason)
	return p, p.record(rec), nil
}

// drainSeenEvery is how often a drain reads Consul's catalog until it
// shows the maintenance set.
const drainSeenEvery = 100 * time.Millisecond

// drainSeen waits for Consul's catalog to show every service of d in
// maintenance with its reason: the local agent syncs it there after it
// answers, and until then load balancers and DNS still send traffic. The
// delay counts from then. A local agent cut off from its servers never
// syncs: the drain fails within drainCallTimeout, before anything stops.
func (a *Agent) drainSeen(ctx context.Context, d *coordinator.Drained) error {
	ctx, cancel := context.WithTimeout(ctx, drainCallTimeout)
	defer cancel()
	byName := map[string][]string{}
	for _, s := range d.Services {
		byName[s.Name] = append(byName[s.Name], s.ID)
	}
	node := a.pub.consulName()
	for {
		err := a.catalogShows(ctx, byName, node, d.Reason)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: not seen in Consul's catalog within %s: %w", errDrain, drainCallTimeout, err)
		case <-time.After(drainSeenEvery):
		}
	}
}

// catalogShows says (nil) whether the catalog shows every service of
// byName (IDs by name) on node in maintenance with reason.
func (a *Agent) catalogShows(ctx context.Context, byName map[string][]string, node, reason string) error {
	for name, ids := range byName {
		reasons, err := a.cfg.Store.CatalogMaintenance(ctx, name, node)
		if err != nil {
			return err
		}
		for _, id := range ids {
			if ownerOf(reasons, id, reason) != maintOurs {
				return fmt.Errorf("service %s not in maintenance there yet", id)
			}
		}
	}
	return nil
}

// drainDelay waits delay with the node drained: cut short if the slot is
// lost or the agent stops, before anything was stopped.
func (t *turn) drainDelay(delay time.Duration) error {
	if delay <= 0 {
		return nil
	}
	timer := time.NewTimer(delay)
	defer timer.Stop()
	var stop <-chan struct{}
	if t.stopping != nil {
		stop = t.stopping.Done()
	}
	select {
	case <-timer.C:
		return nil
	case <-t.hold.Lost():
		return fmt.Errorf("%w: the delay was cut short: %w", errDrain, lockstep.ErrSessionLost)
	case <-stop:
		return fmt.Errorf("%w: the delay was cut short: the agent stops", errDrain)
	}
}

// undrain lifts, at end, what the node's record says the agent drained,
// if liftNow says so: only what is still in maintenance with the reason
// recorded. What cannot be lifted now stays recorded, for a next look.
func (a *Agent) undrain(ctx context.Context, end drainEnd, healthy, claimed bool) {
	d := a.pub.drain()
	if d == nil {
		a.liftStrays(ctx, end, healthy, claimed)
	}
	if !liftNow(end, d != nil, healthy, claimed) {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), drainCallTimeout)
	defer cancel()
	reasons, err := a.cfg.Store.Maintenance(ctx)
	if err != nil {
		a.log.Warn("cannot lift the drain yet; the next look tries again", "error", err)
		return
	}
	lift, left := liftPlan(d, reasons)
	for _, s := range left {
		a.log.Warn("drain: service now in someone else's maintenance; left as it is, for them to lift", "service", s.Name, "id", s.ID)
	}
	for _, s := range lift {
		if err := a.cfg.Store.LiftMaintenance(ctx, s.ID); err != nil {
			a.log.Warn("cannot lift the drain yet; the next look tries again", "service", s.ID, "error", err)
			return
		}
	}
	if len(lift) > 0 {
		a.log.Info("drain lifted: services out of maintenance", "services", serviceIDs(lift))
	}
	a.pub.setDrain(nil)
}

// missingNote says which services of update.drain the node does not have,
// in its record's reason while its drain is recorded.
func missingNote(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return "drain: no service " + strings.Join(q, ", ") + " registered on this node's Consul agent; nothing drained for it"
}

func serviceIDs(ss []coordinator.DrainedService) []string {
	ids := make([]string, len(ss))
	for i, s := range ss {
		ids[i] = s.ID
	}
	return ids
}
