package coordinator

import (
	"context"
	"errors"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/lockstep"
)

// The Store is an agent's one way to Consul: these are what an agent asks
// of it beside the group's records, its session and semaphore, and its
// node's service in the local Consul agent's catalog.

// NewSession makes a lockstep session on the store's Consul.
func (s *Store) NewSession(ctx context.Context, opts lockstep.SessionOptions) (*lockstep.Session, error) {
	return lockstep.NewSession(ctx, s.c, opts)
}

// NewSemaphore returns the semaphore of opts.Prefix on the store's Consul,
// contended for by sess.
// Its stagger counts from the store's first sight of a release (Releases),
// unless opts says otherwise.
func (s *Store) NewSemaphore(sess *lockstep.Session, opts lockstep.Options) (*lockstep.Semaphore, error) {
	if opts.Releases == nil {
		opts.Releases = s.Releases(opts.Prefix)
	}
	return lockstep.New(s.c, sess, opts)
}

// ConsulNode reads the name of the node of the local Consul agent.
func (s *Store) ConsulNode(ctx context.Context) (string, error) {
	var self struct{ Config struct{ NodeName string } }
	_, err := s.c.Raw().Query("/v1/agent/self", &self, (&api.QueryOptions{}).WithContext(ctx))
	return self.Config.NodeName, err
}

// RegisterService registers reg with the local Consul agent; replace drops
// the service's checks that reg does not list. A token that may not write
// the service is refused with ErrACLDenied.
func (s *Store) RegisterService(ctx context.Context, reg *api.AgentServiceRegistration, replace bool) error {
	err := s.c.Agent().ServiceRegisterOpts(reg, api.ServiceRegisterOpts{ReplaceExistingChecks: replace}.WithContext(ctx))
	if err != nil {
		return consulError(s.c, err)
	}
	return nil
}

// UpdateTTL passes, warns or fails the TTL check checkID, with output.
func (s *Store) UpdateTTL(ctx context.Context, checkID, output, status string) error {
	return s.c.Agent().UpdateTTLOpts(checkID, output, status, (&api.QueryOptions{}).WithContext(ctx))
}

// DeregisterService removes service id from the local Consul agent.
func (s *Store) DeregisterService(id string) error { return s.c.Agent().ServiceDeregister(id) }

// HasLocalService says whether the local Consul agent has service id: a
// read of the agent's own state, no catalog write.
func (s *Store) HasLocalService(ctx context.Context, id string) (bool, error) {
	svc, _, err := s.c.Agent().Service(id, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		var se api.StatusError
		if errors.As(err, &se) && se.Code == 404 {
			return false, nil
		}
		return false, consulError(s.c, err)
	}
	return svc != nil, nil
}
