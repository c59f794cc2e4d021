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

// AliveServiceName is the Consul service whose instances carry each
// agent's alive check (agent.Config.AliveURL), one per agent: tags that
// never change, unlike the group's service, whose tags follow each
// node's state. No group's service is named so (ServiceName).
const AliveServiceName = "rollagent"

// AliveServiceID is node's instance of AliveServiceName. No group or node
// name holds ':', so it is no other node's, and no group service's.
func AliveServiceID(group, node string) string { return ServiceID(group, node) + ":alive" }

// AliveTags are the tags of node's alive instance, which never change;
// the first names its group, which Down's read of the failing checks
// selects by.
func AliveTags(group, node string) []string { return []string{aliveGroupTag(group), "node:" + node} }

func aliveGroupTag(group string) string { return "group:" + group }

// AliveAliasCheckID is the check on node's service that shows the health
// of its AliveServiceID instance, for the Consul UI and for agents from
// before the alive instance, which count it as DownAgent like any check of
// the service other than the workload's. Down reads the alive instance's
// own check instead (judge).
func AliveAliasCheckID(group, node string) string { return ServiceID(group, node) + ":alive-alias" }

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
//
// Down reads every record only when it must (a full read): while a host is
// down (serfHealth critical), since any record may name its Consul node,
// and while the mark of the latest full read by any reader
// (Keys.DownCheck) is missing, older than fullReadEvery, dated
// ahead of this reader's clock by more than downCheckSkew, or says it saw
// a record whose writer does not keep the stop index (NodeState.StopIndex:
// an older agent, an older ACL policy), or a stop mark not in the index.
// Otherwise it reads the records of
// the nodes that the failing checks of the group's service and the stop
// index (Keys.Stopped) name, and no other: every stop mark that a writer
// keeping the index wrote is in it, and every other reason is judged on
// the node's own record, so the answer is the same. A stop mark written
// without the index after a full read that found every record keeping it
// (an agent downgraded, a policy narrowed) is counted from the next full
// read, within fullReadEvery (docs/kv-layout.md, "Older versions").
func (s *Store) Down(ctx context.Context, group string) (map[string]DownReason, error) {
	k, err := s.Keys(group)
	if err != nil {
		return nil, err
	}
	in, err := s.readDownInputs(ctx, group, k)
	if err != nil {
		return nil, err
	}
	if in.full(s.clock()) {
		err = s.readAllRecords(ctx, k, group, &in)
	} else {
		err = s.readSomeRecords(ctx, k, group, &in)
	}
	if err != nil {
		return nil, err
	}
	down, hosts := in.judge(group)
	if len(hosts) > 0 {
		svc := ServiceName(group)
		inst, err := s.instances(ctx, svc)
		if err != nil {
			return nil, err
		}
		for n, node := range inst {
			if hosts[node] && onItsNode(in.recs[n], node) && !in.removed(n) {
				down.add(n, DownHost)
			}
		}
	}
	return down, nil
}

// judge is Down's verdict on what in holds, and the Consul nodes whose
// host is down, whose service instances the caller judges.
func (in *downInputs) judge(group string) (downSet, map[string]bool) {
	down, hosts := downSet{}, map[string]bool{}
	for _, c := range in.checks {
		n, ok := checkNode(group, c)
		switch {
		case c.CheckID == "serfHealth":
			if c.Status == api.HealthCritical {
				hosts[c.Node] = true
			}
		case !ok, in.removed(n):
		case !onItsNode(in.recs[n], c.Node):
		case c.ServiceName == AliveServiceName && in.recs[n] == nil:
			// Every group's agents may write the service "rollagent": an
			// alive instance in the name of a node that has no record
			// (one the group never had) may be another group's token's,
			// registered on any Consul node. A node with no record has no
			// workload deployed that its agent's death would take away.
		case c.CheckID == AliveAliasCheckID(group, n):
			// The alias is critical also while any node-level check of its
			// Consul node is (an operator's disk check, `consul maint`),
			// which says nothing of the agent: the alive instance's own
			// check, which Down reads too, is what says it answers.
		case c.CheckID != WorkloadCheckID(group, n):
			if c.Status == api.HealthCritical {
				down.add(n, DownAgent)
			}
		case in.recs[n] != nil && in.recs[n].SHA != "":
			down.add(n, DownWorkload)
		}
	}
	for name, r := range in.recs {
		if r.ConsulNode != "" && hosts[r.ConsulNode] {
			down.add(name, DownHost)
		}
		if r.Stopped != nil && r.SHA != "" { // nothing deployed: never available
			down.add(name, DownAgentStopped)
		}
	}
	return down, hosts
}

// checkNode is the node of group whose check c is: one of its instance of
// the group's service, or of its alive instance (AliveServiceID).
func checkNode(group string, c *api.HealthCheck) (string, bool) {
	n, ok := strings.CutPrefix(c.ServiceID, ServiceName(group)+"-")
	switch {
	case !ok:
		return "", false
	case c.ServiceName == AliveServiceName:
		return strings.CutSuffix(n, ":alive")
	case c.ServiceName == ServiceName(group):
		return n, true
	}
	return "", false
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
