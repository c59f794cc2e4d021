package agent

import (
	"context"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/lockstep"
)

// catalog mirrors this node's record into a Consul service (tags and
// meta), so that the Consul UI shows each node's SHA and state, with the
// workload's check, and the checks a session is bound to. It is the only
// one that registers the service.
type catalog struct {
	store  *coordinator.Store
	group  string
	node   string
	log    hclog.Logger
	record *nodeRecord     // what to mirror
	health *workloadHealth // the workload check's status
	// healthURL makes the workload check an HTTP check Consul runs, when
	// set, instead of a TTL check that keepHealth passes.
	healthURL string
	// aliveURL, when set, makes the alive check (Config.AliveURL), run by
	// Consul every aliveEvery, as aliveID, on an instance of its own
	// (registerAlive), which an alias check on the service shows.
	aliveURL   string
	aliveEvery time.Duration
	// aliveID is this process's own: an agent restarted after a kill
	// registers its alive instance anew, which replaces the old process's
	// check and so ends its session at once. Under one ID, the new
	// process's answers would keep the dead one's session, and its slot,
	// alive.
	aliveID string
	// aliveInline says the token may not register the alive instance (a
	// policy from before it): the alive check goes on the service itself,
	// listed in one registration only (see register).
	aliveInline bool
	// aliveSwept says dropAliveInstance has run.
	aliveSwept bool
	// noMirror registers the service once, and again only for the
	// session's or the alive check (Config.noStateMirror).
	noMirror bool
	// changed is a buffered(1) signal to mirror: sends never block.
	changed chan struct{}

	// regMu orders registrations, so that one made without the session's
	// check never lands after one made with it while the session lives.
	regMu      sync.Mutex
	session    sessionCheck // the live session's check, if any
	registered string       // what the last registration said, to skip a repeat
	// aliveOn says a registration that listed the alive check (of the
	// alive instance, or of the service when aliveInline) has landed since
	// the last forget. Later ones leave it out, and so leave it running:
	// Consul restarts a check that a registration lists, and arms the
	// restarted one to go critical at its first failed run.
	aliveOn bool
}

func (s *catalog) serviceID() string { return coordinator.ServiceID(s.group, s.node) }

// signal asks mirror for a registration, without waiting.
func (s *catalog) signal() {
	select {
	case s.changed <- struct{}{}:
	default: // an update is already pending; it will take the latest state
	}
}

// mirrorSettle lets a burst of state changes reach the Consul service as
// one registration: replacing, verifying and converged can come within
// milliseconds, and each registration is a catalog write for Consul, made
// while the next node takes its turn. The UI lags by as much.
const mirrorSettle = 500 * time.Millisecond

// mirror re-registers the service with the latest state, once per burst of
// signals, until ctx ends. A registration that fails is tried again with
// backoff: nothing else may come to signal it, and until it lands the UI
// shows an old state, and a dropped session's check stays on the service.
func (s *catalog) mirror(ctx context.Context) {
	var retry backoff
	var again <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.changed:
		case <-again:
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(mirrorSettle):
		}
		select {
		case <-s.changed: // came while settling: this registration covers it
		default:
		}
		again = nil
		if err := s.mirrorOnce(ctx); err != nil && ctx.Err() == nil {
			d := retry.next()
			s.log.Warn("could not update the consul service; trying again", "in", d, "error", err)
			again = time.After(d)
			continue
		}
		retry.reset()
		s.record.clearStopIndex(ctx)
	}
}

// mirrorOnce registers the service with the latest state. Re-registering
// resets the workload check to the status given, so it reads the
// workload's health now, not the last periodic reading.
func (s *catalog) mirrorOnce(ctx context.Context) error {
	health, _ := s.health.readHealth(ctx)
	n := s.record.current()
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s.regMu.Lock()
	defer s.regMu.Unlock()
	return s.register(rctx, n, health)
}

// register registers the service with n, and the session's check while
// there is one, unless the last registration said the same; first the
// alive instance, unless it is registered already (registerAlive). Callers
// hold regMu.
//
// Every registration lists all the service's checks and replaces them:
// that drops the checks a killed predecessor left (its session's then
// ends at once), which would stay critical there for good, and the
// session's check goes by being left out (dropSession). The alias of the
// alive check is listed each time: it has no run of failures to re-arm,
// and so the service's tags, which Consul copies into each check it is
// given, stay the same in the check as in the service (a check left out
// keeps the tags of its last listing, and Consul's anti-entropy then
// writes it to the catalog again at every full sync, forever).
//
// With aliveInline, the alive check itself is on the service: it is listed
// once, and again after forget, and the registrations in between leave it
// out and keep the checks they do not list, or a live holder would lose
// its session to a single failed run after each change of state.
func (s *catalog) register(ctx context.Context, n coordinator.NodeState, health string) error {
	if s.aliveOn && s.said(n, health) == s.registered {
		// Nothing to write, so no need to read whether the Consul agent
		// still has the alive instance (registerAlive): a Consul agent
		// that lost it lost the service too, which the next write finds.
		return nil
	}
	if err := s.registerAlive(ctx); err != nil {
		return err
	}
	reg := s.service(n, health)
	listAlive := s.aliveURL != "" && s.aliveInline && !s.aliveOn
	switch {
	case listAlive:
		reg.Checks = append(reg.Checks, s.aliveCheck())
	case s.aliveURL != "" && !s.aliveInline:
		reg.Checks = append(reg.Checks, s.aliveAlias())
	}
	if s.session.id != "" {
		reg.Checks = append(reg.Checks, &api.AgentServiceCheck{CheckID: s.session.id, Name: "rollagent session",
			TTL: s.session.ttl.String(), Status: api.HealthPassing, Notes: lockstep.CheckNotes})
	}
	said := s.said(n, health)
	if said == s.registered && !listAlive {
		return nil // each registration is a catalog write
	}
	replace := !s.aliveInline || listAlive
	if err := s.store.RegisterService(ctx, reg, replace); err != nil {
		s.registered = ""
		return err
	}
	s.registered = said
	s.aliveOn = s.aliveOn || listAlive
	return nil
}

// said is what a registration as n says, to tell whether the last one said
// it already: without the state mirror (noMirror), only the session.
func (s *catalog) said(n coordinator.NodeState, health string) string {
	if s.noMirror {
		return fmt.Sprint(s.session)
	}
	reg := s.service(n, health)
	return fmt.Sprint(reg.Tags, reg.Meta, health, s.session)
}

// service is the service's registration as n, with the workload's check.
func (s *catalog) service(n coordinator.NodeState, health string) *api.AgentServiceRegistration {
	reg := &api.AgentServiceRegistration{
		ID: s.serviceID(), Name: coordinator.ServiceName(s.group),
		Tags:   []string{"sha:" + coordinator.ShortSHA(n.SHA), "state:" + string(n.State), "desired:" + coordinator.ShortSHA(n.Desired)},
		Meta:   map[string]string{"group": s.group, "node": s.node, "sha": n.SHA, "desired": n.Desired, "state": string(n.State)},
		Checks: api.AgentServiceChecks{s.workloadCheck(health)},
	}
	if n.Gate != "" {
		// What holds the node, in the UI's list of services and instance:
		// outside a window, blocked by a check, paused by an operator.
		reg.Tags = append(reg.Tags, "gate:"+string(n.Gate))
		reg.Meta["gate"] = string(n.Gate)
	}
	if n.Error != "" {
		reg.Meta["reason"] = metaValue(n.Error)
	}
	return reg
}

// forget makes the next registration go ahead even if it says the same as
// the last one, and register the alive check again: it may be gone with a
// Consul agent that lost its state. The check comes back under a new ID,
// which drops the old one, and with it any session a failed try left on
// it: a try whose answer ran out may have been carried through by Consul,
// and that session, never used, would last as long as this process.
// Called only when the agent has no session of its own.
func (s *catalog) forget() {
	s.regMu.Lock()
	defer s.regMu.Unlock()
	s.registered, s.aliveOn = "", false
	s.aliveID = lockstep.NewCheckID(s.serviceID() + ":alive")
}

// deregister removes the service when the agent stops, then its alive
// instance: the other way round, the alias would go critical first.
func (s *catalog) deregister() {
	if err := s.store.DeregisterService(s.serviceID()); err != nil {
		s.log.Debug("could not deregister the service", "error", err)
	}
	if s.aliveURL == "" || s.aliveInline {
		return
	}
	if err := s.store.DeregisterService(s.aliveServiceID()); err != nil {
		s.log.Debug("could not deregister the alive instance", "error", err)
	}
}

// maxMetaValue is the longest service meta value Consul takes.
const maxMetaValue = 512

// metaValue cuts s to what Consul takes as a meta value, on a rune
// boundary, marking the cut.
func metaValue(s string) string {
	if len(s) <= maxMetaValue {
		return s
	}
	cut := maxMetaValue - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
