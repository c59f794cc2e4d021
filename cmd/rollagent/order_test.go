package main

import (
	"encoding/json"
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
	spec := func(image, extra string) string {
		t.Helper()
		return writeSpec(t, image+".hcl", []byte("container { image = \"rollagent-demo/web:"+image+"\" }\nupdate {\n"+extra+"  last {\n    check = \"raft-leader\"\n  }\n}\n"))
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

// status shows both waits of an order: the group's gate waiting for the
// group update.after names, with how far it is, and the node that waits
// to go last (update.last), in text and in JSON; a commit that closes a
// cycle is refused, naming it.
func TestStatusShowsTheOrder(t *testing.T) {
	srv, c, st := groupkit.Dev(t)
	ctx := testkit.Context(t, time.Minute)
	commit := func(group, spec string) (int, string) {
		t.Helper()
		code, out, errs := runCLI(t, srv.HTTPAddr, "commit", group, "-f", writeSpec(t, group+".hcl", []byte(spec)))
		return code, out + errs
	}
	if code, out := commit("managers", "container { image = \"rollagent-demo/web:v1\" }\nupdate {\n  last {\n    check = \"raft-leader\"\n  }\n}\n"); code != 0 {
		t.Fatalf("commit managers: %s", out)
	}
	if code, out := commit("workers", "container { image = \"rollagent-demo/web:v1\" }\nupdate {\n  after = [\"managers\"]\n}\n"); code != 0 {
		t.Fatalf("commit workers: %s", out)
	}
	if code, out := commit("managers", "container { image = \"rollagent-demo/web:v2\" }\nupdate {\n  after = [\"workers\"]\n}\n"); code == 0 ||
		!strings.Contains(out, "group managers waits for group workers, which waits for group managers") {
		t.Fatalf("commit managers after workers: code %d, %s; want the cycle refused", code, out)
	}
	gs, err := st.Read(ctx, "managers", nil)
	if err != nil {
		t.Fatal(err)
	}
	sha := gs.Desired.SHA
	node := leaderCheckPassing(t, c)
	for _, n := range []coordinator.NodeState{
		{Node: "m1", ConsulNode: "h1", SHA: sha, Desired: sha, State: coordinator.StateConverged, Since: time.Now()},
		{Node: "m2", ConsulNode: node, Desired: sha, State: coordinator.StateWaiting, Since: time.Now(), Gate: coordinator.GateWaitingToGoLast},
		{Node: "m3", ConsulNode: "h3", Desired: sha, State: coordinator.StateWaiting, Since: time.Now()},
	} {
		if err := st.PutNode(ctx, "managers", n); err != nil {
			t.Fatal(err)
		}
	}
	_, out, _ := runCLI(t, srv.HTTPAddr, "status", "workers")
	if want := "CLOSED (waiting_for_group): waiting for group managers (1 of 3 converged on " + coordinator.ShortSHA(sha) + ")"; !strings.Contains(out, want) {
		t.Errorf("status workers: want %q in:\n%s", want, out)
	}
	_, out, _ = runCLI(t, srv.HTTPAddr, "status", "managers")
	if want := `m2 waits to go last (check "raft-leader" passes on it)`; !strings.Contains(out, want) || strings.Contains(out, "CLOSED") {
		t.Errorf("status managers: want %q and an open gate in:\n%s", want, out)
	}
	_, out, _ = runCLI(t, srv.HTTPAddr, "status", "managers", "-o", "json")
	var doc struct {
		GoLast []struct{ Node, Check string } `json:"waiting_to_go_last"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.GoLast) != 1 || doc.GoLast[0].Node != "m2" || doc.GoLast[0].Check != "raft-leader" {
		t.Errorf("status -o json waiting_to_go_last = %+v, want m2 on raft-leader", doc.GoLast)
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
