package coordinator

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/hashicorp/consul/api"
)

// ServiceName is the Consul service every node of group registers, which
// the Consul UI lists with each node's SHA and state.
func ServiceName(group string) string { return "rollagent-" + group }

// ServiceID is node's instance of its group's service.
func ServiceID(group, node string) string { return ServiceName(group) + "-" + node }

// WorkloadCheckID is the check of node's workload on its service.
func WorkloadCheckID(group, node string) string { return ServiceID(group, node) + ":workload" }

// Unavailable lists the nodes of group that are down and cannot act,
// sorted: an instance of the group's service whose agent no longer answers
// its liveness check (a critical check other than the workload's), or on a
// Consul node whose serfHealth is critical (the host is gone). They count
// against max_parallel like a node being replaced, until they are back or
// their service leaves the catalog (deregistered, or reaped with its
// Consul node): a rollout never takes a node down beside them. A node
// whose workload alone is unhealthy is not listed: its agent is alive and
// claims its own slot when it is behind (the agent's PlanClaimDown), and
// listing it would have every node of a first deploy wait on the others.
func (s *Store) Unavailable(ctx context.Context, group string) ([]string, error) {
	svc := ServiceName(group)
	q := (&api.QueryOptions{Filter: fmt.Sprintf(`ServiceName == %q or CheckID == "serfHealth"`, svc)}).WithContext(ctx)
	checks, _, err := s.c.Health().State(api.HealthCritical, q)
	if err != nil {
		return nil, consulError(s.c, err)
	}
	down, hosts := map[string]bool{}, map[string]bool{}
	for _, c := range checks {
		if c.CheckID == "serfHealth" {
			hosts[c.Node] = true
		} else if n, ok := strings.CutPrefix(c.ServiceID, svc+"-"); ok && c.CheckID != WorkloadCheckID(group, n) {
			down[n] = true
		}
	}
	if len(hosts) > 0 {
		inst, _, err := s.c.Catalog().Service(svc, "", (&api.QueryOptions{}).WithContext(ctx))
		if err != nil {
			return nil, consulError(s.c, err)
		}
		for _, i := range inst {
			if n, ok := strings.CutPrefix(i.ServiceID, svc+"-"); ok && hosts[i.Node] {
				down[n] = true
			}
		}
	}
	out := make([]string, 0, len(down))
	for n := range down {
		out = append(out, n)
	}
	sort.Strings(out)
	return out, nil
}

// Registered lists the nodes of group with an instance of the group's
// service in Consul's catalog, whatever its checks say: a node that is
// down is still registered; one whose agent stopped cleanly, whose Consul
// node left or was reaped, or that was forced to leave with -prune, is not.
func (s *Store) Registered(ctx context.Context, group string) (map[string]bool, error) {
	svc := ServiceName(group)
	inst, meta, err := s.c.Catalog().Service(svc, "", (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, consulError(s.c, err)
	}
	// An instance the token may not see is not gone: taking it for gone
	// would show a live node lost.
	if meta.ResultsFilteredByACLs {
		return nil, fmt.Errorf("consul: permission denied: the token may not read every instance of service %q, so Consul left some out", svc)
	}
	out := make(map[string]bool, len(inst))
	for _, i := range inst {
		if n, ok := strings.CutPrefix(i.ServiceID, svc+"-"); ok {
			out[n] = true
		}
	}
	return out, nil
}
