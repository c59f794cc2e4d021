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
	// aliveURL, when set, adds the alive check (Config.AliveURL), run by
	// Consul every aliveEvery, to the service, as aliveID (see register).
	aliveURL   string
	aliveEvery time.Duration
	// aliveID is this process's own: an agent restarted after a kill
	// registers its service anew, which replaces the old process's check
	// and so ends its session at once. Under one ID, the new process's
	// answers would keep the dead one's session, and its slot, alive.
	aliveID string
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
	// aliveOn says a registration that listed the alive check has landed
	// since the last forget. Later ones leave it out, and so leave it
	// running: Consul restarts a check that a registration lists, and arms
	// the restarted one to go critical at its first failed run.
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
// there is one, unless the last registration said the same. Callers hold
// regMu.
//
// A registration that lists the alive check replaces the service's checks:
// that drops the checks a killed predecessor left on the service (its
// session's then ends at once), which would stay critical there for good.
// It is made once, and again after forget; the others leave the alive
// check out, and so keep the checks they do not list, or a live holder
// would lose its session to a single failed run after each change of state.
// Without the alive check, every registration replaces the checks: the
// session's check goes by being left out (dropSession).
func (s *catalog) register(ctx context.Context, n coordinator.NodeState, health string) error {
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
	listAlive := s.aliveURL != "" && !s.aliveOn
	if listAlive {
		reg.Checks = append(reg.Checks, s.aliveCheck())
	}
	if s.session.id != "" {
		reg.Checks = append(reg.Checks, &api.AgentServiceCheck{CheckID: s.session.id, Name: "rollagent session",
			TTL: s.session.ttl.String(), Status: api.HealthPassing, Notes: lockstep.CheckNotes})
	}
	said := fmt.Sprint(reg.Tags, reg.Meta, health, s.session)
	if s.noMirror {
		said = fmt.Sprint(s.session)
	}
	if said == s.registered && !listAlive {
		return nil // each registration is a catalog write
	}
	replace := s.aliveURL == "" || listAlive
	if err := s.store.RegisterService(ctx, reg, replace); err != nil {
		s.registered = ""
		return err
	}
	s.registered = said
	s.aliveOn = s.aliveOn || listAlive
	return nil
}

// forget makes the next registration go ahead even if it says the same as
// the last one, and list the alive check again: it may be gone with a
// Consul agent that lost its state.
func (s *catalog) forget() {
	s.regMu.Lock()
	defer s.regMu.Unlock()
	s.registered, s.aliveOn = "", false
}

// deregister removes the service when the agent stops.
func (s *catalog) deregister() {
	if err := s.store.DeregisterService(s.serviceID()); err != nil {
		s.log.Debug("could not deregister the service", "error", err)
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
