package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/testkit"
)

// The exporter says waiting_to_go_last while the node update.last's check
// passes on (the leader) waits for the rest of its group, which status
// lists in waiting_to_go_last[] under an open gate; once the others
// converged the leader's turn comes and the gate is open again.
func TestExporterWaitingToGoLast(t *testing.T) {
	srv := consultest.NewDev(t)
	c := srv.Client()
	st := coordinator.NewStore(c, coordinator.DefaultPrefix)
	ctx := testkit.Context(t, time.Minute)
	path := filepath.Join(t.TempDir(), "managers.hcl")
	spec := "container { image = \"rollagent-demo/web:v1\" }\nupdate {\n  last {\n    check = \"raft-leader\"\n  }\n}\n"
	if err := os.WriteFile(path, []byte(spec), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := runCLI(t, srv.HTTPAddr, "commit", "managers", "-f", path); code != 0 {
		t.Fatalf("commit: %s", errs)
	}
	gs, err := st.Read(ctx, "managers", nil)
	if err != nil {
		t.Fatal(err)
	}
	sha := gs.Desired.SHA
	leader := leaderCheckPassing(t, c)
	put := func(n coordinator.NodeState) {
		t.Helper()
		n.Desired, n.Since = sha, time.Now()
		if err := st.PutNode(ctx, "managers", n); err != nil {
			t.Fatal(err)
		}
	}
	put(coordinator.NodeState{Node: "m1", ConsulNode: "h1", SHA: sha, State: coordinator.StateConverged})
	put(coordinator.NodeState{Node: "m2", ConsulNode: leader, State: coordinator.StateWaiting, Gate: coordinator.GateWaitingToGoLast})
	put(coordinator.NodeState{Node: "m3", ConsulNode: "h3", State: coordinator.StateReplacing})
	url := startExporter(t, srv.HTTPAddr, "managers")
	scrapeUntil(t, url, map[[2]string]float64{
		{"rollagent_group_gate", "state=waiting_to_go_last"}: 1,
		{"rollagent_group_gate", "state=open"}:               0,
		{"rollagent_group_nodes_behind", ""}:                 2,
	})
	// m3 converged: nothing is left ahead of the leader, whose turn it is.
	put(coordinator.NodeState{Node: "m3", ConsulNode: "h3", SHA: sha, State: coordinator.StateConverged})
	scrapeUntil(t, url, map[[2]string]float64{
		{"rollagent_group_gate", "state=waiting_to_go_last"}: 0,
		{"rollagent_group_gate", "state=open"}:               1,
		{"rollagent_group_nodes_behind", ""}:                 1,
	})
}
