package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/testkit/groupkit"
)

var updatePlan = flag.Bool("update-plan", false, "rewrite testdata/plan-*.golden")

// planFleet commits testdata/web.json to group web and writes the records
// of three nodes that converged on it 20s, 40s and 60s after the commit, at
// max_parallel 1: a pace of 20s a node.
func planFleet(t *testing.T, srv *consultest.Server) (sha string) {
	t.Helper()
	code, out, errs := runCLI(t, srv.HTTPAddr, "commit", "web", "-f", "testdata/web.json")
	if code != 0 {
		t.Fatalf("commit: %d %s", code, errs)
	}
	sha = strings.SplitN(out, "\n", 2)[0]
	k := groupkit.Keys(t, "web")
	p, _, err := srv.Client().KV().Get(k.Desired(), nil)
	if err != nil || p == nil {
		t.Fatalf("desired: %v", err)
	}
	var d coordinator.Desired
	if err := json.Unmarshal(p.Value, &d); err != nil {
		t.Fatal(err)
	}
	st := coordinator.NewStore(srv.Client(), coordinator.DefaultPrefix)
	for i, n := range []string{"n1", "n2", "n3"} {
		putNode(t, st, coordinator.NodeState{Node: n, SHA: sha, Desired: sha, State: coordinator.StateConverged,
			Since: d.CommittedAt.Add(time.Duration(i+1) * 20 * time.Second)})
	}
	return sha
}

// catalogSnapshot is every service, node and check Consul's catalog holds,
// a check and a service instance with its index: equal snapshots mean nothing was registered or
// deregistered, and no check or instance updated.
func catalogSnapshot(t *testing.T, c *api.Client) string {
	t.Helper()
	checks, _, err := c.Health().State(api.HealthAny, nil)
	if err != nil {
		t.Fatal(err)
	}
	nodes, _, err := c.Catalog().Nodes(nil)
	if err != nil {
		t.Fatal(err)
	}
	services, _, err := c.Catalog().Services(nil)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, ch := range checks {
		lines = append(lines, fmt.Sprintf("check %s/%s %s %d", ch.Node, ch.CheckID, ch.Status, ch.ModifyIndex))
	}
	for _, n := range nodes {
		// Not the node's ModifyIndex nor its meta: a Consul agent moves
		// them itself, by its anti-entropy sync, shortly after it starts.
		lines = append(lines, fmt.Sprintf("node %s %s", n.Node, n.Address))
	}
	for s := range services {
		inst, _, err := c.Catalog().Service(s, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, i := range inst {
			lines = append(lines, fmt.Sprintf("service %s %s/%s %d", s, i.Node, i.ServiceID, i.ModifyIndex))
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// runPlan runs plan and checks it wrote nothing to Consul, KV or catalog.
func runPlan(t *testing.T, srv *consultest.Server, args ...string) (int, string, string) {
	t.Helper()
	kv, cat := kvSnapshot(t, srv.Client()), catalogSnapshot(t, srv.Client())
	code, out, errs := runCLI(t, srv.HTTPAddr, append([]string{"plan"}, args...)...)
	kvUnchanged(t, srv.Client(), kv)
	if after := catalogSnapshot(t, srv.Client()); after != cat {
		t.Fatalf("catalog changed:\nbefore:\n%s\nafter:\n%s", cat, after)
	}
	return code, out, errs
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *updatePlan {
		if err := os.WriteFile(path, []byte(got), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Fatalf("output differs from %s (-update-plan rewrites it):\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

// A plan prints the SHA, the difference field by field, the nodes that
// would move, the gate and the time, writes nothing, and exits 2 when a
// commit would change something and 0 when it would not.
func TestPlanGolden(t *testing.T) {
	srv := consultest.NewDev(t)
	planFleet(t, srv)
	tests := []struct {
		name, spec, golden string
		code               int
	}{
		{"changed image", "testdata/plan-image.json", "plan-image.golden", exitChanges},
		{"policy only", "testdata/plan-policy.json", "plan-policy.golden", exitChanges},
		// The same spec in HCL: the canonical forms are equal.
		{"no change", "testdata/web.hcl", "plan-nochange.golden", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errs := runPlan(t, srv, "web", "-f", tt.spec)
			if code != tt.code {
				t.Fatalf("exit %d, want %d; stderr %q", code, tt.code, errs)
			}
			if errs != "" {
				t.Fatalf("stderr %q, want none", errs)
			}
			golden(t, tt.golden, out)
		})
	}
}
