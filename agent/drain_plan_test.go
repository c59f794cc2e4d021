package agent

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
)

// What is lifted when: a drain the agent recorded is lifted as the new
// workload converges, as the step after it is refused, after an undo once
// the restored workload is healthy, and at a look only with the workload
// healthy and no slot held; nothing is lifted without a record.
func TestLiftNow(t *testing.T) {
	ends := map[drainEnd]string{drainLook: "look", drainConverged: "converged", drainUndone: "undone", drainRefused: "refused"}
	want := map[string]bool{
		// end/recorded/healthy/claimed
		"look/rec/healthy/free":         true,
		"look/rec/healthy/claimed":      false, // the turn under the slot decides
		"look/rec/down/free":            false, // still out of service: stays drained
		"look/rec/down/claimed":         false,
		"converged/rec/healthy/free":    true,
		"converged/rec/healthy/claimed": true,
		"converged/rec/down/free":       true, // passed min_healthy_time by definition
		"converged/rec/down/claimed":    true,
		"undone/rec/healthy/free":       true,
		"undone/rec/healthy/claimed":    true,
		"undone/rec/down/free":          false, // the restored workload is not back
		"undone/rec/down/claimed":       false,
		"refused/rec/healthy/free":      true, // nothing was touched
		"refused/rec/healthy/claimed":   true,
		"refused/rec/down/free":         true,
		"refused/rec/down/claimed":      true,
	}
	for end, en := range ends {
		for _, rec := range []bool{true, false} {
			for _, healthy := range []bool{true, false} {
				for _, claimed := range []bool{true, false} {
					name := fmt.Sprintf("%s/%s/%s/%s", en, pick(rec, "rec", "none"), pick(healthy, "healthy", "down"), pick(claimed, "claimed", "free"))
					t.Run(name, func(t *testing.T) {
						if got := liftNow(end, rec, healthy, claimed); got != (rec && want[name]) {
							t.Errorf("liftNow = %v, want %v", got, rec && want[name])
						}
					})
				}
			}
		}
	}
}

func pick(b bool, yes, no string) string {
	if b {
		return yes
	}
	return no
}

// Whose a maintenance is, by its reason: the agent's own only with the
// reason it recorded.
func TestOwnerOf(t *testing.T) {
	const ours = "rollagent: web/n1 drained (t1)"
	reasons := map[string]string{"web-1": ours, "web-2": "operator: disk swap", "web-3": ""}
	for _, tc := range []struct {
		id, recorded string
		want         maintOwner
	}{
		{"web-1", ours, maintOurs},
		{"web-2", ours, maintOthers},
		{"web-3", ours, maintOthers}, // an empty reason is Consul's default, not ours
		{"web-4", ours, maintNone},
		{"web-1", "", maintOthers}, // not recorded: not ours, whatever it says
		{"web-1", "rollagent: web/n1 drained (t0)", maintOthers},
	} {
		t.Run(tc.id+"/"+tc.recorded, func(t *testing.T) {
			if got := ownerOf(reasons, tc.id, tc.recorded); got != tc.want {
				t.Errorf("ownerOf = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPlanDrain(t *testing.T) {
	const ours = "rollagent: web/n1 drained (t1)"
	svc := func(id, name string) coordinator.DrainedService {
		return coordinator.DrainedService{ID: id, Name: name}
	}
	local := map[string][]string{"web": {"web-1", "web-2"}, "admin": {"admin"}}
	for _, tc := range []struct {
		name              string
		names             []string
		reasons           map[string]string
		set, kept, others []coordinator.DrainedService
		missing           []string
		drained           bool
	}{
		{name: "every instance of a name", names: []string{"web"},
			set: []coordinator.DrainedService{svc("web-1", "web"), svc("web-2", "web")}, drained: true},
		{name: "a name not on the node", names: []string{"admin", "gone"},
			set: []coordinator.DrainedService{svc("admin", "admin")}, missing: []string{"gone"}, drained: true},
		{name: "only missing", names: []string{"gone"}, missing: []string{"gone"}},
		{name: "an operator's maintenance is left alone", names: []string{"web"}, reasons: map[string]string{"web-1": "operator"},
			set: []coordinator.DrainedService{svc("web-2", "web")}, others: []coordinator.DrainedService{svc("web-1", "web")}, drained: true},
		{name: "what a crashed agent set is kept", names: []string{"web"}, reasons: map[string]string{"web-1": ours},
			set: []coordinator.DrainedService{svc("web-2", "web")}, kept: []coordinator.DrainedService{svc("web-1", "web")}, drained: true},
		{name: "all in an operator's", names: []string{"admin"}, reasons: map[string]string{"admin": "operator"},
			others: []coordinator.DrainedService{svc("admin", "admin")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := planDrain(tc.names, local, tc.reasons, ours)
			if !slices.Equal(p.set, tc.set) || !slices.Equal(p.kept, tc.kept) || !slices.Equal(p.others, tc.others) ||
				!slices.Equal(p.missing, tc.missing) || p.drained() != tc.drained {
				t.Errorf("plan = %+v (drained %v), want set %v kept %v others %v missing %v (drained %v)",
					p, p.drained(), tc.set, tc.kept, tc.others, tc.missing, tc.drained)
			}
			rec := p.record(coordinator.Drained{Reason: ours})
			if want := slices.Concat(tc.kept, tc.set); !slices.Equal(rec.Services, want) || !slices.Equal(rec.Missing, tc.missing) {
				t.Errorf("record = %+v, want services %v missing %v (never an operator's)", rec, want, tc.missing)
			}
		})
	}
}

// A lift takes out of maintenance only what is in it with the recorded
// reason; another's is left, and one lifted already needs nothing.
func TestLiftPlan(t *testing.T) {
	const ours = "rollagent: web/n1 drained (t1)"
	a, b, c := coordinator.DrainedService{ID: "a"}, coordinator.DrainedService{ID: "b"}, coordinator.DrainedService{ID: "c"}
	d := &coordinator.Drained{Reason: ours, Services: []coordinator.DrainedService{a, b, c}}
	lift, left := liftPlan(d, map[string]string{"a": ours, "b": "operator since", "x": ours})
	if !slices.Equal(lift, []coordinator.DrainedService{a}) || !slices.Equal(left, []coordinator.DrainedService{b}) {
		t.Errorf("lift %v left %v, want lift [a] left [b] (c lifted already, x not recorded)", lift, left)
	}
	if lift, left := liftPlan(nil, map[string]string{"a": ours}); lift != nil || left != nil {
		t.Errorf("nothing recorded: lift %v left %v, want none", lift, left)
	}
}

// A drain's delay is waited under the node's slot: the claim's lease
// counts it, and the drain's calls, so that a waiter does not report a
// draining node lost.
func TestLeaseCountsTheDrain(t *testing.T) {
	a := &Agent{cfg: Config{Runtime: &Exec{}, leaseGrace: leaseGrace}}
	plain := &hashspec.Spec{Update: hashspec.Update{HealthyDeadline: hashspec.DefaultHealthyDeadline}}
	drained := &hashspec.Spec{Update: hashspec.Update{HealthyDeadline: hashspec.DefaultHealthyDeadline,
		Drain: &hashspec.Drain{Services: []string{"web"}, Delay: hashspec.MaxDrainDelay}}}
	if got, want := a.lease(drained)-a.lease(plain), hashspec.MaxDrainDelay.Std()+3*drainCallTimeout; got != want {
		t.Errorf("a drain adds %s to the lease, want %s (its delay and its three calls: plan, maintenance, catalog)", got, want)
	}
}

// The node's record carries the drain from when it is set until it is
// lifted, with the missing services named in its reason; a new agent takes
// over, once, the drain its node's record in KV holds, and a later read
// that still holds it (the lift not yet written) does not bring it back.
func TestRecordCarriesTheDrain(t *testing.T) {
	r := &nodeRecord{node: "n1", log: hclog.NewNullLogger()}
	d := &coordinator.Drained{Reason: "rollagent: web/n1 drained (t1)", Missing: []string{"absent"},
		Services: []coordinator.DrainedService{{ID: "web-1", Name: "web"}}}
	r.sync(&coordinator.GroupState{Nodes: []coordinator.NodeState{{Node: "n2", Drained: d}, {Node: "n1", Drained: d}}})
	n := r.state("", "", coordinator.StateReplacing, "")
	if !n.Drained.Equal(d) || !strings.Contains(n.Error, `no service "absent"`) {
		t.Fatalf("record after the first read: drained %+v, reason %q; want the KV record's drain and the missing service named", n.Drained, n.Error)
	}
	if n := r.state("", "", coordinator.StateFailed, "boom"); n.Error != "boom" {
		t.Errorf("a record with a reason of its own: %q, want it kept", n.Error)
	}
	r.setDrain(nil)
	r.sync(&coordinator.GroupState{Nodes: []coordinator.NodeState{{Node: "n1", Drained: d}}})
	if n := r.state("", "", coordinator.StateConverged, ""); n.Drained != nil || n.Error != "" {
		t.Fatalf("record after the lift: drained %+v, reason %q; want none", n.Drained, n.Error)
	}
	other := &nodeRecord{node: "n3", log: hclog.NewNullLogger()}
	other.sync(&coordinator.GroupState{Nodes: []coordinator.NodeState{{Node: "n1", Drained: d}}})
	if other.drain() != nil {
		t.Error("a node took over another node's drain")
	}
}

// A drain whose record is gone is told by its reason's start, for its
// group and node alone: an operator's maintenance, another node's drain,
// or another group's, is not this node's.
func TestStrayDrains(t *testing.T) {
	reasons := map[string]string{
		"web-1":   drainReason("web", "n1") + " to replace its workload (t1)",
		"web-2":   drainReason("web", "n1") + " to replace its workload (t0)",
		"admin-1": "operator: disk swap",
		"api-1":   drainReason("web", "n10") + " to replace its workload (t1)",
		"api-2":   drainReason("webx", "n1") + " to replace its workload (t1)",
		"api-3":   "operator quoting " + drainReason("web", "n1"),
	}
	if got := strayDrains(reasons, "web", "n1"); !slices.Equal(got, []string{"web-1", "web-2"}) {
		t.Errorf("strays %v, want [web-1 web-2]", got)
	}
	if got := strayDrains(map[string]string{"admin-1": "operator"}, "web", "n1"); got != nil {
		t.Errorf("strays %v, want none", got)
	}
}
