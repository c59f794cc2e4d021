package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/testkit"
	"github.com/rollagent/rollagent/internal/testkit/groupkit"
)

// A plan orders the nodes as the gate will: the canaries first, and the
// node update.last's check passes on (the leader) at the end, marked with
// why, in text and in JSON; the leader is never a canary, as at commit.
func TestPlanLeaderLast(t *testing.T) {
	srv, c, st := groupkit.Dev(t)
	ctx := testkit.Context(t, time.Minute)
	dir := t.TempDir()
	spec := func(image, extra string) string {
		t.Helper()
		path := filepath.Join(dir, image+".hcl")
		text := "container { image = \"rollagent-demo/web:" + image + "\" }\nupdate {\n" + extra + "  last {\n    check = \"raft-leader\"\n  }\n}\n"
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	if code, _, errs := runCLI(t, srv.HTTPAddr, "commit", "web", "-f", spec("v1", "")); code != 0 {
		t.Fatalf("commit: %s", errs)
	}
	gs, err := st.Read(ctx, "web", nil)
	if err != nil {
		t.Fatal(err)
	}
	sha := gs.Desired.SHA
	leader := leaderCheckPassing(t, c)
	// a1 on the leader: first by name, so only the rule puts it last.
	for _, n := range []coordinator.NodeState{
		{Node: "a1", ConsulNode: leader},
		{Node: "m2", ConsulNode: "h2"},
		{Node: "m3", ConsulNode: "h3"},
	} {
		n.SHA, n.Desired, n.State, n.Since = sha, sha, coordinator.StateConverged, time.Now()
		putNode(t, st, n)
	}
	why := `check "raft-leader" passes on its Consul node ` + leader
	tests := []struct {
		name, extra string
		canary      bool
	}{
		{"leader last", "", false},
		{"canary first, leader last", "  canary = 1\n", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := spec("v2", tt.extra)
			code, out, errs := runPlan(t, srv, "web", "-f", path, "-o", "json")
			if code != exitChanges || errs != "" {
				t.Fatalf("exit %d, stderr %q", code, errs)
			}
			var p planJSON
			if err := json.Unmarshal([]byte(out), &p); err != nil {
				t.Fatal(err)
			}
			m := p.Nodes.Move
			if len(m) != 3 || m[2].Node != "a1" || m[2].Last != why || m[0].Last != "" || m[1].Last != "" {
				t.Fatalf("move %+v: want a1 last, marked %q\n%s", m, why, out)
			}
			if m[0].Canary != tt.canary || m[1].Canary || !strings.HasSuffix(p.Nodes.Order, orderLast) {
				t.Fatalf("move %+v, order %q: want canary first %v, and the order to say who goes last", m, p.Nodes.Order, tt.canary)
			}
			_, text, _ := runPlan(t, srv, "web", "-f", path)
			if want := "3. a1  from " + coordinator.ShortSHA(sha) + ", converged; last: " + why; !strings.Contains(text, want) {
				t.Fatalf("want %q in:\n%s", want, text)
			}
		})
	}
}

// leaderCheckPassing registers update.last's "raft-leader" check, passing,
// on c's Consul agent, waits until the catalog has it, and returns that
// agent's Consul node: the leader's.
func leaderCheckPassing(t *testing.T, c *api.Client) string {
	t.Helper()
	node, err := c.Agent().NodeName()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Agent().CheckRegister(&api.AgentCheckRegistration{ID: "raft-leader", Name: "raft-leader",
		AgentServiceCheck: api.AgentServiceCheck{TTL: "10m", Status: api.HealthPassing}}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "the catalog to have the leader check passing", func() bool {
		checks, _, err := c.Health().State(api.HealthPassing, &api.QueryOptions{Filter: `CheckID == "raft-leader"`})
		return err == nil && len(checks) == 1
	})
	return node
}
