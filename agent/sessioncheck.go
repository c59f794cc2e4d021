package agent

import (
	"context"
	"time"

	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/lockstep"
)

// sessionCheck is the TTL check a lockstep session is bound to. It is
// registered with the service, so that one catalog write carries both the
// node's "waiting" and its session's check.
type sessionCheck struct {
	id  string
	ttl time.Duration
}

// withAlive registers the alive check and the service as n, unless the
// alive check's registration has landed already, and returns its ID.
// Consul has the check in its catalog when this returns, so a session may
// name it.
func (s *catalog) withAlive(ctx context.Context, n coordinator.NodeState) (string, error) {
	s.regMu.Lock()
	defer s.regMu.Unlock()
	if s.aliveOn {
		return s.aliveID, nil
	}
	if err := s.register(ctx, n, s.health.last()); err != nil {
		return "", err
	}
	return s.aliveID, nil
}

// withSession registers the service as n together with a new TTL check for
// a session to be bound to, and returns the check's ID. Consul has the
// check in its catalog when this returns, so a session may name it.
func (s *catalog) withSession(ctx context.Context, n coordinator.NodeState, ttl time.Duration) (string, error) {
	s.regMu.Lock()
	defer s.regMu.Unlock()
	health := s.health.last()
	s.session = sessionCheck{id: lockstep.NewCheckID(s.serviceID()), ttl: ttl}
	if err := s.register(ctx, n, health); err != nil {
		s.session = sessionCheck{}
		return "", err
	}
	return s.session.id, nil
}

// dropSession ends the session whose check is id, by removing the check,
// which makes Consul invalidate the session in that same write. The
// removal rides on the mirror's next registration, which replaces the
// service's checks with those it lists: after a turn, the one that mirrors
// "converged", so one request to the Consul agent does both. The delay (the
// mirror's settle) holds nothing up: Release has deleted the session's
// keys, and nobody passes its check any more (Session.Abandon), so it ends
// within its TTL even if Consul cannot be reached. When the mirror has
// stopped, the service's deregistration removes the check.
func (s *catalog) dropSession(id string) {
	s.regMu.Lock()
	defer s.regMu.Unlock()
	if s.session.id == id {
		s.session = sessionCheck{}
	}
	s.registered = "" // register even if nothing else changed, to drop the check
	s.signal()
}
