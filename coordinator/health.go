package coordinator

import (
	"cmp"
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/hashicorp/consul/api"
)

// ServiceName is the Consul service every node of group registers, which
// the Consul UI lists with each node's SHA and state.
func ServiceName(group string) string { return "rollagent-" + group }

// ServiceID is node's instance of its group's service.
func ServiceID(group, node string) string { return ServiceName(group) + "-" + node }

// WorkloadCheckID is the check of node's workload on its service.
func WorkloadCheckID(group, node string) string { return ServiceID(group, node) + ":workload" }

// DownReason says why Consul's state makes a node count as down.
type DownReason string

// Values of DownReason, most telling first: a node down for several is
// given the first. They are part of `status -o json`.
const (
	// DownHost: the Consul node its agent runs on (its record's
	// consul_node, or its service instance's) has serfHealth critical.
	DownHost DownReason = "host_down"
	// DownAgentStopped: its agent stopped cleanly (its record's stop mark)
	// and is not back: nothing vouches for its workload.
	DownAgentStopped DownReason = "agent_stopped"
	// DownAgent: a check of its agent (liveness, session) is critical.
	DownAgent DownReason = "agent_not_answering"
	// DownWorkload: its workload check is not passing (critical, or
	// warning) and its record shows a workload deployed (sha not ""): it
	// served, and does not now.
	DownWorkload DownReason = "workload_down"
)

var downRank = map[DownReason]int{DownHost: 0, DownAgentStopped: 1, DownAgent: 2, DownWorkload: 3}

// downSet collects the nodes that are down, each with its most telling
// reason.
type downSet map[string]DownReason

func (d downSet) add(node string, why DownReason) {
	if cur, ok := d[node]; !ok || downRank[why] < downRank[cur] {
		d[node] = why
	}
}

// Unavailable lists the nodes of group that Down finds down, sorted.
func (s *Store) Unavailable(ctx context.Context, group string) ([]string, error) {
	down, err := s.Down(ctx, group)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(down))
	for n := range down {
		out = append(out, n)
	}
	sort.Strings(out)
	return out, nil
}

// Down says which nodes of group are down, and why. They count against
// max_parallel like a node being replaced, so a rollout never takes a node
// down beside them. A check of an instance on another Consul node than
// the one the node's record names is not the node's (onItsNode). Down are:
//   - an instance of the group's service with a critical check other than
//     the workload's (its agent does not answer);
//   - a node whose host is down: serfHealth critical on the Consul node its
//     record names (consul_node), registered or not, or on which its
//     service instance is;
//   - a node with a workload deployed whose record carries the stop mark
//     of a clean stop: its agent is stopped, or stopping, so nothing
//     vouches for its workload until its agent is back (it writes its
//     record without the mark) or `node rm` removes the record; registered
//     or not, and whatever the catalog says of its host: a reboot's Consul
//     agent leaves the catalog gracefully as the host goes down, just as
//     `consul force-leave -prune` takes a dead one out. An agent writes
//     its mark (into its release, when it holds a slot) before its service
//     leaves the catalog, and one that starts again writes its record
//     without it at its first look, so there is no gap between the two;
//   - a node whose workload check is not passing (critical, or warning:
//     Docker's health still starting after a restart, a health hook that
//     failed for less than DownAfter) while its record shows a workload
//     deployed: it is not healthy by the runtime's own status, whether or
//     not that is a sustained signal yet. One with nothing deployed (a
//     first deploy) was never available and is not counted, or every node
//     of a first deploy would wait on the others.
//
// A node the operator removed (`node rm`: no record, and a removal mark)
// is none of these, whatever the catalog still holds of it, until its
// agent writes a record again.
func (s *Store) Down(ctx context.Context, group string) (map[string]DownReason, error) {
	k, err := s.Keys(group)
	if err != nil {
		return nil, err
	}
	var checks api.HealthChecks
	var gone map[string]bool
	var cerr, gerr error
	var wg sync.WaitGroup
	wg.Go(func() { checks, cerr = s.failingChecks(ctx, group) })
	wg.Go(func() { gone, gerr = s.removedNodes(ctx, k) })
	recs, kept, err := s.nodeRecords(ctx, k)
	wg.Wait()
	if err = cmp.Or(err, cerr, gerr); err != nil {
		return nil, err
	}
	// A node the operator removed (`node rm`) and that has not written a
	// record since is out of the group: what is left of it in the catalog
	// (a dead agent's service) no longer counts it.
	removed := func(n string) bool { return !kept[n] && gone[n] }
	svc := ServiceName(group)
	down, hosts := downSet{}, map[string]bool{}
	for _, c := range checks {
		n, ok := strings.CutPrefix(c.ServiceID, svc+"-")
		switch {
		case c.CheckID == "serfHealth":
			if c.Status == api.HealthCritical {
				hosts[c.Node] = true
			}
		case !ok, removed(n):
		case !onItsNode(recs[n], c.Node):
		case c.CheckID != WorkloadCheckID(group, n):
			if c.Status == api.HealthCritical {
				down.add(n, DownAgent)
			}
		case recs[n] != nil && recs[n].SHA != "":
			down.add(n, DownWorkload)
		}
	}
	for name, r := range recs {
		if r.ConsulNode != "" && hosts[r.ConsulNode] {
			down.add(name, DownHost)
		}
		if r.Stopped != nil && r.SHA != "" { // nothing deployed: never available
			down.add(name, DownAgentStopped)
		}
	}
	if len(hosts) > 0 {
		inst, err := s.instances(ctx, svc)
		if err != nil {
			return nil, err
		}
		for n, node := range inst {
			if hosts[node] && onItsNode(recs[n], node) && !removed(n) {
				down.add(n, DownHost)
			}
		}
	}
	return down, nil
}

// onItsNode says whether an instance of a node's service on Consul node
// consulNode is to be believed: it is on the Consul node that the node's
// own record names (consul_node), which only that node's token and an
// operator's may write. Another node's token can register an instance in
// any node's name, with a critical check, through its own Consul agent:
// on its own Consul node, which this tells apart. A record that names no
// Consul node (an agent that could not read it, or from before it did)
// or no record at all leaves nothing to tell by, and the instance is
// believed, as it was before records named one.
func onItsNode(rec *NodeState, consulNode string) bool {
	return rec == nil || rec.ConsulNode == "" || rec.ConsulNode == consulNode
}

// failingChecks are the checks of group's service and the serfHealth
// checks that are not passing: critical, or warning, which only a workload
// check says (not healthy now, and not yet down by a sustained signal).
func (s *Store) failingChecks(ctx context.Context, group string) (api.HealthChecks, error) {
	q := (&api.QueryOptions{Filter: fmt.Sprintf(`(ServiceName == %q or CheckID == "serfHealth") and Status != "passing"`, ServiceName(group))}).WithContext(ctx)
	checks, _, err := s.c.Health().State(api.HealthAny, q)
	if err != nil {
		return nil, consulError(s.c, err)
	}
	return checks, nil
}

// nodeRecords are group's node records that decode, by the name in their
// key, and the names of every record, one that does not decode included
// (kept): such a node has a record still, and a removal mark no longer
// speaks for it.
func (s *Store) nodeRecords(ctx context.Context, k Keys) (recs map[string]*NodeState, kept map[string]bool, err error) {
	pairs, _, err := s.list(ctx, k.NodesPrefix(), nil)
	if err != nil {
		return nil, nil, err
	}
	recs, kept = make(map[string]*NodeState, len(pairs)), make(map[string]bool, len(pairs))
	for _, p := range pairs {
		name := strings.TrimPrefix(p.Key, k.NodesPrefix())
		kept[name] = true
		var n NodeState
		if decode(p.Key, p.Value, &n) == nil {
			recs[name] = &n
		}
	}
	return recs, kept, nil
}

// removedNodes are the nodes with a removal mark (Keys.Removed).
func (s *Store) removedNodes(ctx context.Context, k Keys) (map[string]bool, error) {
	pairs, _, err := s.list(ctx, k.RemovedPrefix(), nil)
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(pairs))
	for _, p := range pairs {
		out[strings.TrimPrefix(p.Key, k.RemovedPrefix())] = true
	}
	return out, nil
}

// instances maps each node of the group's service in Consul's catalog to
// the Consul node its instance is on. An instance the token may not see is
// not gone: taking it for gone would show a live node lost.
func (s *Store) instances(ctx context.Context, svc string) (map[string]string, error) {
	inst, meta, err := s.c.Catalog().Service(svc, "", (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, consulError(s.c, err)
	}
	if meta.ResultsFilteredByACLs {
		return nil, fmt.Errorf("consul: permission denied: the token may not read every instance of service %q, so Consul left some out", svc)
	}
	out := make(map[string]string, len(inst))
	for _, i := range inst {
		if n, ok := strings.CutPrefix(i.ServiceID, svc+"-"); ok {
			out[n] = i.Node
		}
	}
	return out, nil
}

// Registered lists the nodes of group with an instance of the group's
// service in Consul's catalog, whatever its checks say: a node that is
// down is still registered; one whose agent stopped cleanly, whose Consul
// node left or was reaped, or that was forced to leave with -prune, is not.
func (s *Store) Registered(ctx context.Context, group string) (map[string]bool, error) {
	inst, err := s.instances(ctx, ServiceName(group))
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(inst))
	for n := range inst {
		out[n] = true
	}
	return out, nil
}
