package agent_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
)

// The Consul service each agent keeps (rollagent-<group>, one instance per
// node, with its SHA and state in tags and meta and a TTL check following
// the workload's health) is checked by checkService from the fleets of
// TestExecRuntime and TestStartFirstKeepsTheOldContainerUp rather than by a
// fleet of its own.

// checkService waits, for at most 20s, for the catalog to show every node of
// ns converged on sha with a passing workload check. The wait covers the
// TTL check: registering the converged state re-registers the check with
// the health last seen, which may be from mid-replacement, and keepHealth
// passes it again within serviceCheckTTL/3 (10s).
func checkService(t *testing.T, f *fleet, ns []string, sha string) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(20 * time.Second)
	problem := ""
	for {
		if problem = serviceProblem(f, ns, sha); problem == "" {
			t.Logf("service rollagent-%s: %d instances converged on %.12s, checks passing after %s",
				f.group, len(ns), sha, time.Since(start).Round(100*time.Millisecond))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("service rollagent-%s after 20s: %s", f.group, problem)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// serviceEntries lists the group's service instances by node.
func serviceEntries(f *fleet) (map[string]*api.ServiceEntry, error) {
	entries, _, err := f.srv.Client().Health().Service("rollagent-"+f.group, "", false, nil)
	if err != nil {
		return nil, err
	}
	out := map[string]*api.ServiceEntry{}
	for _, e := range entries {
		n := e.Service.Meta["node"]
		if _, dup := out[n]; dup {
			return nil, fmt.Errorf("two instances for node %q", n)
		}
		out[n] = e
	}
	return out, nil
}

// serviceProblem says what is not yet as checkService wants, or "".
func serviceProblem(f *fleet, ns []string, sha string) string {
	byNode, err := serviceEntries(f)
	if err != nil {
		return err.Error()
	}
	if len(byNode) != len(ns) {
		return fmt.Sprintf("%d instances, want %d (one per node)", len(byNode), len(ns))
	}
	for _, n := range ns {
		e := byNode[n]
		if e == nil {
			return "no instance for node " + n
		}
		id := "rollagent-" + f.group + "-" + n
		s := e.Service
		if s.ID != id {
			return fmt.Sprintf("node %s: service ID %q, want %q", n, s.ID, id)
		}
		for _, tag := range []string{"sha:" + sha[:12], "state:" + string(coordinator.StateConverged), "desired:" + sha[:12]} {
			if !slices.Contains(s.Tags, tag) {
				return fmt.Sprintf("node %s: tags %q lack %q", n, s.Tags, tag)
			}
		}
		if s.Meta["sha"] != sha || s.Meta["desired"] != sha || s.Meta["state"] != string(coordinator.StateConverged) || s.Meta["group"] != f.group {
			return fmt.Sprintf("node %s: meta %v", n, s.Meta)
		}
		if st := checkStatus(e, id+":workload"); st != api.HealthPassing {
			return fmt.Sprintf("node %s: workload check is %q", n, st)
		}
	}
	return ""
}

func checkStatus(e *api.ServiceEntry, checkID string) string {
	for _, c := range e.Checks {
		if c.CheckID == checkID {
			return c.Status
		}
	}
	return "missing"
}
