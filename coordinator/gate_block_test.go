package coordinator

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/hashspec"
)

func TestBlockRule(t *testing.T) {
	s := specWith(t, "pause", 1, 1)
	s.Update.BlockOn = []hashspec.Block{{Service: "postgres"}}
	now := time.Date(2026, 6, 2, 0, 0, 0, 0, time.UTC)
	lag := BlockFailure{Block: hashspec.Block{Check: "replication-lag"}, Check: "replication-lag", Status: "critical", Node: "db2", Service: "postgres"}
	for _, tc := range []struct {
		name   string
		spec   *hashspec.Spec
		health *GateHealth
		closes bool
		reason string
	}{
		{"no blocks", specWith(t, "pause", 1, 1), nil, false, ""},
		{"not read", s, nil, true, "cannot read Consul health for block_on: not read"},
		{"read failed", s, &GateHealth{Err: "connection refused"}, true, "cannot read Consul health for block_on: connection refused"},
		{"passing", s, &GateHealth{}, false, ""},
		{"failing", s, &GateHealth{Failing: []BlockFailure{lag}}, true,
			`blocked by Consul check "replication-lag" (critical) on node db2, service postgres`},
		{"two failing", s, &GateHealth{Failing: []BlockFailure{lag, lag}}, true, "service postgres (and 1 more)"},
		{"no check matches", s, &GateHealth{Failing: []BlockFailure{{Block: hashspec.Block{Service: "pg", Tag: "primary"}}}}, true,
			`blocked by service "pg" tag "primary": no Consul check matches it`},
		{"on the node", s, &GateHealth{Failing: []BlockFailure{{Block: hashspec.Block{Check: "disk"}, OnNode: true, Node: "h1"}}}, true,
			`blocked by check "disk": no Consul check matches it on node h1`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := group(fixture{spec: tc.spec})(t)
			g.Health = tc.health
			v := checkPollRule(t, blockRule{}, GateInput{Group: g, Now: now}, tc.closes, tc.reason, BlockRecheck)
			if !tc.closes {
				return
			}
			if w := v.Wait(now); w != v.Reason {
				t.Errorf("Wait = %q: a poll is no time the gate opens", w)
			}
			if !v.BeforeStep {
				t.Errorf("verdict %+v: a failed check must be judged again before a holder's first step", v)
			}
		})
	}
	// A CANCEL stops every step: it wins over a hold.
	cg := group(fixture{spec: s, cancel: true})(t)
	cg.Health = &GateHealth{Failing: []BlockFailure{lag}}
	if v := Evaluate(GateInput{Group: cg, Now: now}); v.State != GateCancelled || v.Hold {
		t.Errorf("cancelled while blocked: %+v, want cancelled and no hold", v)
	}
}

// blockFailures matches a service (with its tag) or a check by its ID or
// name, on one Consul node for block_on_node, and says which block matches
// nothing.
func TestBlockFailures(t *testing.T) {
	chk := func(node, id, name, svc, status string, tags ...string) *api.HealthCheck {
		return &api.HealthCheck{Node: node, CheckID: id, Name: name, ServiceName: svc, Status: status, ServiceTags: tags}
	}
	checks := api.HealthChecks{
		chk("db1", "service:pg1", "pg1 alive", "postgres", api.HealthPassing, "primary"),
		chk("db2", "service:pg2", "pg2 alive", "postgres", api.HealthCritical, "replica"),
		chk("db2", "lag", "replication-lag", "postgres", api.HealthWarning, "replica"),
		chk("h1", "disk", "disk", "", api.HealthPassing),
		chk("h2", "disk", "disk", "", api.HealthCritical),
	}
	type b = hashspec.Block
	for _, tc := range []struct {
		name   string
		blocks []hashspec.Block
		node   string
		want   []string
	}{
		{"primary passes", []b{{Service: "postgres", Tag: "primary"}}, "", nil},
		{"service fails on a replica", []b{{Service: "postgres"}}, "", []string{
			`blocked by Consul check "replication-lag" (warning) on node db2, service postgres`,
			`blocked by Consul check "pg2 alive" (critical) on node db2, service postgres`}},
		{"check by name", []b{{Check: "replication-lag"}}, "", []string{`"replication-lag" (warning) on node db2`}},
		{"check by ID", []b{{Check: "lag"}}, "", []string{`"replication-lag" (warning) on node db2`}},
		{"check anywhere", []b{{Check: "disk"}}, "", []string{`"disk" (critical) on node h2`}},
		{"check on a node that passes", []b{{Check: "disk"}}, "h1", nil},
		{"check on the node that fails", []b{{Check: "disk"}}, "h2", []string{`"disk" (critical) on node h2`}},
		{"no such tag", []b{{Service: "postgres", Tag: "standby"}}, "", []string{`service "postgres" tag "standby": no Consul check matches it`}},
		{"not on this node", []b{{Service: "postgres"}}, "h1", []string{`no Consul check matches it on node h1`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := blockFailures(tc.blocks, tc.node != "", tc.node, checks)
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %d failures", got, len(tc.want))
			}
			for i, f := range got {
				if !strings.Contains(f.String(), tc.want[i]) {
					t.Errorf("failure %d = %q, want it to say %q", i, f, tc.want[i])
				}
			}
		})
	}
}

// The filter asks Consul for what blockFailures matches, and for nothing
// when nothing is blocked on.
func TestBlockFilter(t *testing.T) {
	got := blockFilter([]hashspec.Block{{Service: "db", Tag: "primary"}, {Check: `a "b"`}})
	want := `(ServiceName == "db" and "primary" in ServiceTags) or CheckID == "a \"b\"" or Name == "a \"b\""`
	if got != want {
		t.Errorf("blockFilter = %s, want %s", got, want)
	}
	if blockFilter(nil) != "" {
		t.Error("no blocks must filter nothing")
	}
}
