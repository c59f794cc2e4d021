package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/consultest"
)

// spreadFleet commits testdata/web.json to group web, registers a Consul
// node for each of six nodes, three in zone a, one each in b and c and one
// without a zone, and writes their records converged on it 20s apart at
// max_parallel 1: a pace of 20s a wave.
func spreadFleet(t *testing.T, srv *consultest.Server) (sha string) {
	t.Helper()
	c := srv.Client()
	nodes := []struct{ node, zone string }{{"a1", "a"}, {"a2", "a"}, {"a3", "a"}, {"b1", "b"}, {"c1", "c"}, {"x1", ""}}
	for _, n := range nodes {
		reg := &api.CatalogRegistration{Node: "host-" + n.node, Address: "192.0.2.1"}
		if n.zone != "" {
			reg.NodeMeta = map[string]string{"zone": n.zone}
		}
		if _, err := c.Catalog().Register(reg, nil); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errs := runCLI(t, srv.HTTPAddr, "commit", "web", "-f", "testdata/web.json")
	if code != 0 {
		t.Fatalf("commit: %d %s", code, errs)
	}
	sha = strings.SplitN(out, "\n", 2)[0]
	st := coordinator.NewStore(c, coordinator.DefaultPrefix)
	gs, err := st.Read(t.Context(), "web", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range nodes {
		putNode(t, st, coordinator.NodeState{Node: n.node, SHA: sha, Desired: sha, State: coordinator.StateConverged, ConsulNode: "host-" + n.node,
			Since: gs.Desired.CommittedAt.Add(time.Duration(i+1) * 20 * time.Second)})
	}
	return sha
}

// A plan under update.max_parallel_per reads each node's zone from the
// Consul node meta of its Consul node, as the gate does, shows it, takes
// the zones in turn, and counts the waves the zone bound makes: six nodes,
// three of them in zone a, at K=3 and max 1 per zone take 3 waves, not
// ceil(6/3) = 2; in text (a golden) and in JSON, as docs/plan-json.md says.
func TestPlanSpread(t *testing.T) {
	srv := consultest.NewDev(t)
	spreadFleet(t, srv)
	code, out, errs := runPlan(t, srv, "web", "-f", "testdata/plan-spread.json")
	if code != exitChanges || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	golden(t, "plan-spread.golden", out)

	code, out, errs = runPlan(t, srv, "web", "-f", "testdata/plan-spread.json", "-o", "json")
	if code != exitChanges || errs != "" {
		t.Fatalf("json: exit %d, stderr %q", code, errs)
	}
	var raw map[string]any
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatal(err)
	}
	documented := docFields(t, "../../docs/plan-json.md")
	for _, path := range jsonPaths("", raw) {
		if !documentedPath(documented, path) {
			t.Errorf("%s is not in docs/plan-json.md", path)
		}
	}
	var p planJSON
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, m := range p.Nodes.Move {
		order = append(order, m.Node+"@"+m.Domain)
	}
	if got, want := strings.Join(order, ","), "a1@zone=a,b1@zone=b,c1@zone=c,x1@,a2@zone=a,a3@zone=a"; got != want {
		t.Errorf("move %s, want %s", got, want)
	}
	if !strings.HasSuffix(p.Nodes.Order, orderSpread) {
		t.Errorf("order %q, want it to say the zones go in turn", p.Nodes.Order)
	}
	if s := p.Gate.MaxParallelPer; s == nil || s.Key != "zone" || s.Max != 1 {
		t.Errorf("gate.max_parallel_per %+v, want zone, 1", s)
	}
	if e := p.Estimate; e == nil || e.Waves != 3 || e.MaxParallel != 3 || e.PerWaveSeconds != 20 || e.Seconds != 60 ||
		e.MaxParallelPer == nil || e.MaxParallelPer.Max != 1 {
		t.Errorf("estimate %+v, want 3 waves of 20s at K=3, 1 per zone", p.Estimate)
	}

	// With the spread committed, a plan reads the domains under the
	// desired spec's key, the same one.
	if code, _, errs := runCLI(t, srv.HTTPAddr, "commit", "web", "-f", "testdata/plan-spread.json"); code != 0 {
		t.Fatalf("commit: %s", errs)
	}
	spec, err := os.ReadFile("testdata/plan-spread.json")
	if err != nil {
		t.Fatal(err)
	}
	v3 := filepath.Join(t.TempDir(), "v3.json")
	if err := os.WriteFile(v3, []byte(strings.Replace(string(spec), "web:v2", "web:v3", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs = runPlan(t, srv, "web", "-f", v3, "-o", "json")
	if err := json.Unmarshal([]byte(out), &p); err != nil || code != exitChanges || errs != "" {
		t.Fatalf("v3: exit %d, %v, stderr %q", code, err, errs)
	}
	order = nil
	for _, m := range p.Nodes.Move {
		order = append(order, m.Node+"@"+m.Domain)
	}
	if got, want := strings.Join(order, ","), "a1@zone=a,b1@zone=b,c1@zone=c,x1@,a2@zone=a,a3@zone=a"; got != want || len(p.Problems) != 0 {
		t.Errorf("v3: move %s, problems %q; want %s", got, p.Problems, want)
	}
}

// The waves a plan counts: K, the bound per domain with a head whose
// domain is full holding the line, and the gate's phases.
func TestPlanWaves(t *testing.T) {
	// "a b:canary -:last": a node in zone=a, a canary in zone=b, and one
	// without a zone that goes last.
	mv := func(spec string) []moveJSON {
		var out []moveJSON
		for i, f := range strings.Fields(spec) {
			m := moveJSON{Node: fmt.Sprintf("n%d", i)}
			f, mark, _ := strings.Cut(f, ":")
			m.Canary = mark == "canary"
			if mark == "last" {
				m.Last = "the leader"
			}
			if f != "-" {
				m.Domain = "zone=" + f
			}
			out = append(out, m)
		}
		return out
	}
	tests := []struct {
		name       string
		moves      string
		k, per     int
		waves      int
		spreadWant string // the domains after spreadOrder
	}{
		{"K alone", "a a a b", 2, 0, 2, "a b a a"},
		{"a zone of three at max 1", "a a a b c -", 3, 1, 3, "a b c - a a"},
		{"max 2 lets a zone move two at once", "a a a b", 4, 2, 2, "a b a a"},
		{"no zone: domains of their own", "- - - -", 2, 1, 2, "- - - -"},
		{"the canary, the rest, the leader: phases", "a:canary b a:last", 3, 1, 3, "a b a"},
		{"K 0 counts as 1", "a b", 0, 0, 2, "a b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			moves := mv(tt.moves)
			spreadOrder(moves)
			var got []string
			for _, m := range moves {
				got = append(got, cmp.Or(strings.TrimPrefix(m.Domain, "zone="), "-"))
			}
			if g := strings.Join(got, " "); g != tt.spreadWant {
				t.Errorf("order %q, want %q", g, tt.spreadWant)
			}
			if w := planWaves(moves, tt.k, tt.per); w != tt.waves {
				t.Errorf("waves %d, want %d", w, tt.waves)
			}
		})
	}
}

// The waves the desired SHA's rollout took, which the time of a wave is
// from: a spread in its spec slowed it, by the domains the nodes have.
func TestPaceWaves(t *testing.T) {
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	zones := map[string]string{"a1": "zone=a", "a2": "zone=a", "a3": "zone=a", "b1": "zone=b"}
	tests := []struct {
		name    string
		spread  *hashspec.Spread
		domains map[string]string
		waves   int
	}{
		{"no spread: ceil(nodes / K)", nil, zones, 2},
		{"three of zone a at max 1", &hashspec.Spread{Key: "zone", Max: 1}, zones, 3},
		{"max 2", &hashspec.Spread{Key: "zone", Max: 2}, zones, 2},
		{"domains unread: ceil(nodes / K)", &hashspec.Spread{Key: "zone", Max: 1}, nil, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gs := &coordinator.GroupState{Desired: &coordinator.Desired{SHA: "new", CommittedAt: at}, Domains: tt.domains,
				Spec: &hashspec.Spec{Update: hashspec.Update{MaxParallel: hashspec.Count(2), MaxParallelPer: tt.spread}}}
			for _, n := range []string{"a1", "a2", "a3", "b1"} {
				gs.Nodes = append(gs.Nodes, coordinator.NodeState{Node: n, SHA: "new", State: coordinator.StateConverged, Since: at.Add(time.Minute)})
			}
			// Not paced: converged on another SHA.
			gs.Nodes = append(gs.Nodes, coordinator.NodeState{Node: "a4", SHA: "old", State: coordinator.StateConverged, Since: at})
			basis, _ := pace(gs)
			if w := paceWaves(gs, basis, 2); basis != 4 || w != tt.waves {
				t.Errorf("basis %d, waves %d; want 4, %d", basis, w, tt.waves)
			}
		})
	}
}
