package coordinator

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
)

// Drained is what a node's agent put into Consul's maintenance mode on its
// node to drain it (update.drain), in the node's record (NodeState), which
// the agent writes before it sets any: Consul's maintenance has no TTL, so
// the agent, or its successor after a crash, lifts from here what it set,
// and only that.
type Drained struct {
	// Services are the service instances (by ID, on the node's Consul
	// agent) put into maintenance, or found already in it with Reason.
	Services []DrainedService `json:"services,omitempty"`
	// Reason is the maintenance reason the agent sets: a maintenance with
	// another (an operator's `consul maint`) is not the agent's to lift.
	Reason string `json:"reason"`
	// Missing are the service names of update.drain with no instance on
	// the node's Consul agent: nothing of them is drained.
	Missing []string  `json:"missing,omitempty"`
	At      time.Time `json:"at"`
}

// DrainedService is one service instance of Drained.
type DrainedService struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// Equal says whether d and o record the same drain.
func (d *Drained) Equal(o *Drained) bool {
	if d == nil || o == nil {
		return d == o
	}
	return d.Reason == o.Reason && d.At.Equal(o.At) && slices.Equal(d.Services, o.Services) && slices.Equal(d.Missing, o.Missing)
}

// serviceMaintPrefix begins the ID of the critical check that Consul's
// agent registers for a service in maintenance, followed by its ID; the
// check's notes hold the reason.
const serviceMaintPrefix = "_service_maintenance:"

// LocalServices lists the IDs of the instances of each of names that the
// local Consul agent has registered, by name; a name with none is absent.
func (s *Store) LocalServices(ctx context.Context, names []string) (map[string][]string, error) {
	svcs, err := s.c.Agent().ServicesWithFilterOpts("", (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, consulError(s.c, err)
	}
	out := map[string][]string{}
	for id, svc := range svcs {
		if slices.Contains(names, svc.Service) {
			out[svc.Service] = append(out[svc.Service], id)
		}
	}
	for _, ids := range out {
		slices.Sort(ids)
	}
	return out, nil
}

// Maintenance reads which services of the local Consul agent are in
// maintenance: the reason by service ID.
func (s *Store) Maintenance(ctx context.Context) (map[string]string, error) {
	checks, err := s.c.Agent().ChecksWithFilterOpts("", (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, consulError(s.c, err)
	}
	out := map[string]string{}
	for id, c := range checks {
		if sid, ok := strings.CutPrefix(id, serviceMaintPrefix); ok {
			out[sid] = c.Notes
		}
	}
	return out, nil
}

// SetMaintenance puts service id of the local Consul agent into
// maintenance with reason (`consul maint -enable -service id`). Consul
// keeps a maintenance already set, and its reason, as it is.
func (s *Store) SetMaintenance(ctx context.Context, id, reason string) error {
	err := s.c.Agent().EnableServiceMaintenanceOpts(id, reason, (&api.QueryOptions{}).WithContext(ctx))
	return consulErrorOrNil(s.c, err)
}

// LiftMaintenance takes service id of the local Consul agent out of
// maintenance, whoever set it: the caller checks the reason first.
func (s *Store) LiftMaintenance(ctx context.Context, id string) error {
	err := s.c.Agent().DisableServiceMaintenanceOpts(id, (&api.QueryOptions{}).WithContext(ctx))
	return consulErrorOrNil(s.c, err)
}

func consulErrorOrNil(c *api.Client, err error) error {
	if err == nil {
		return nil
	}
	return consulError(c, err)
}

// CatalogMaintenance reads which instances of service name on Consul node
// consulNode are in maintenance in Consul's catalog, which load balancers
// and DNS read (the local agent syncs its own there after it answers): the
// reason by service ID. An empty consulNode reads every node's.
func (s *Store) CatalogMaintenance(ctx context.Context, name, consulNode string) (map[string]string, error) {
	checks, _, err := s.c.Health().Checks(name, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, consulError(s.c, err)
	}
	out := map[string]string{}
	for _, c := range checks {
		if strings.HasPrefix(c.CheckID, serviceMaintPrefix) && (consulNode == "" || c.Node == consulNode) {
			out[c.ServiceID] = c.Notes
		}
	}
	return out, nil
}
