package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/consultest"
)

// status shows a percentage and the number it means now, in text and in
// JSON, and the exporter's max_parallel gauge is that number; both follow
// the group as it grows.
func TestStatusPercent(t *testing.T) {
	srv := consultest.NewDev(t)
	spec := "container { image = \"rollagent-demo/web:v1\" }\nupdate {\n  max_parallel = \"25%\"\n  max_failures = \"10%\"\n}\n"
	sha := commitWebSpec(t, srv.HTTPAddr, "web.hcl", spec)
	st := coordinator.NewStore(srv.Client(), coordinator.DefaultPrefix)
	nodes := func(from, to int) {
		for i := from; i < to; i++ {
			putNode(t, st, coordinator.NodeState{Node: fmt.Sprintf("n%d", i), Desired: sha, State: coordinator.StateWaiting, Since: time.Now()})
		}
	}
	nodes(0, 7)
	url := startExporter(t, srv.HTTPAddr, "web")
	for _, tc := range []struct {
		nodes, k, failures int
	}{{7, 1, 1}, {8, 2, 1}} {
		nodes(7, tc.nodes)
		_, out, _ := runCLI(t, srv.HTTPAddr, "status", "web")
		want := fmt.Sprintf("max_parallel 25%% (= %d of %d nodes)  max_failures 10%% (= %d of %d nodes)", tc.k, tc.nodes, tc.failures, tc.nodes)
		if !strings.Contains(out, want) {
			t.Errorf("status: want %q in:\n%s", want, out)
		}
		g := statusDoc(t, srv.HTTPAddr).Gate
		if g.MaxParallel != tc.k || g.MaxParallelPolicy != "25%" || g.Nodes != tc.nodes || g.MaxFailures != tc.failures || g.MaxFailuresPolicy != "10%" {
			t.Errorf("status -o json gate: %+v, want max_parallel %d of %d nodes", g, tc.k, tc.nodes)
		}
		scrapeUntil(t, url, map[[2]string]float64{{"rollagent_group_max_parallel", ""}: float64(tc.k)})
	}
}

// plan shows a percentage with the number it would mean for the group,
// and estimates with that number.
func TestPlanPercent(t *testing.T) {
	srv := consultest.NewDev(t)
	planFleet(t, srv)
	data, err := os.ReadFile("testdata/plan-policy.json")
	if err != nil {
		t.Fatal(err)
	}
	path := writeSpec(t, "web.json", []byte(strings.Replace(string(data), `"max_parallel": 2`, `"max_parallel": "50%"`, 1)))
	_, out, errs := runPlan(t, srv, "web", "-f", path)
	for _, want := range []string{"update.max_parallel: 1 → 50%", "gate now: open  max_parallel 50% (= 1 of 3 nodes)", "3 wave(s) of max_parallel 1"} {
		if !strings.Contains(out, want) {
			t.Errorf("plan: want %q in:\n%s%s", want, out, errs)
		}
	}
	_, out, _ = runPlan(t, srv, "web", "-f", path, "-o", "json")
	var doc struct {
		Gate planGateJSON `json:"gate"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("plan -o json: %v\n%s", err, out)
	}
	if g := doc.Gate; g.MaxParallel != 1 || g.MaxParallelPolicy != "50%" || g.Nodes != 3 {
		t.Errorf("plan -o json gate: %+v, want 50%% of 3 nodes, K 1", g)
	}
}
