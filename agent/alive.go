package agent

import (
	"context"
	"errors"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/lockstep"
)

// The alive check (Config.AliveURL) is on an instance of a service of its
// own (coordinator.AliveServiceName), not on the group's service, whose
// tags change with each change of the node's state. Consul copies a
// service's tags into a check only when a registration lists it, and the
// alive check may be listed only once (re-listing re-arms it, see
// aliveFailures); on the group's service it kept the tags of its first
// listing while the catalog's copy took the new ones, and each Consul
// agent's anti-entropy found the two apart and wrote the check to the
// catalog at every full sync, for good (hashicorp/consul#3869, #5631).

func (s *catalog) aliveServiceID() string { return coordinator.AliveServiceID(s.group, s.node) }

// registerAlive registers the alive instance with the alive check, unless
// that has landed since the last forget, replacing its checks: a killed
// predecessor's alive check (another aliveID) goes, and its session with
// it. A token refused the registration (a policy from before the alive
// instance) puts the check on the group's service instead for as long as
// this process runs (aliveInline), as agents did before, which it says
// once. Callers hold regMu.
func (s *catalog) registerAlive(ctx context.Context) error {
	if s.aliveURL == "" || s.aliveInline {
		s.dropAliveInstance()
		return nil
	}
	if s.aliveOn {
		// A Consul agent that lost its state has lost the instance too:
		// the group's service's alias of it would be critical while this
		// agent answers (agents from before the alive instance count
		// that as down). Registrations come with changes of state only,
		// so this local read is rare.
		if ok, err := s.store.HasLocalService(ctx, s.aliveServiceID()); err != nil || ok {
			return err
		}
		s.aliveOn = false
	}
	reg := &api.AgentServiceRegistration{ID: s.aliveServiceID(), Name: coordinator.AliveServiceName,
		Tags:   coordinator.AliveTags(s.group, s.node),
		Meta:   map[string]string{"group": s.group, "node": s.node},
		Checks: api.AgentServiceChecks{s.aliveCheck()}}
	err := s.store.RegisterService(ctx, reg, true)
	if errors.Is(err, coordinator.ErrACLDenied) {
		s.log.Warn("the token may not register the service "+coordinator.AliveServiceName+
			"; the alive check goes on the group's service, which Consul's anti-entropy then writes to the catalog"+
			" again at each full sync once its tags change (give the token the shipped policy's rule for it)",
			"error", err)
		s.aliveInline, s.registered = true, ""
		return nil
	}
	if err != nil {
		return err
	}
	s.aliveOn = true
	return nil
}

// aliveAlias is the group's service's check of the alive instance, with
// the alive check's name and notes, so that the UI and Down see the agent's
// liveness on the node's service as before. An alias has no run of
// failures: Consul recomputes its status from the aliased instance's checks
// as soon as they change, and a registration restores the status it had,
// so it is listed in every registration at no risk. An alias of an
// instance that is missing is critical: registerAlive comes first.
func (s *catalog) aliveAlias() *api.AgentServiceCheck {
	return &api.AgentServiceCheck{CheckID: coordinator.AliveAliasCheckID(s.group, s.node), Name: "rollagent alive",
		Status: api.HealthPassing, AliasService: s.aliveServiceID(), Notes: lockstep.AliveNotes}
}

// dropAliveInstance deregisters, once per process, an alive instance of
// the node that no agent of this process's mode keeps: one a killed agent
// left, with the alive check that is critical from then on, when this one
// runs without an alive check (TTL mode) or may not register it. Down
// would count the node as agent_not_answering for as long as it stays.
// Deregistering it ends the killed agent's session too. Best effort: most
// often there is none (404), and a token refused the service "rollagent"
// may not deregister it either (403), which leaves it as it was.
func (s *catalog) dropAliveInstance() {
	if s.aliveSwept {
		return
	}
	s.aliveSwept = true
	if err := s.store.DeregisterService(s.aliveServiceID()); err != nil {
		s.log.Debug("could not deregister an alive instance left by an earlier agent", "error", err)
	}
}
