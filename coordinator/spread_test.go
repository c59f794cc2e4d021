package coordinator

import (
	"slices"
	"testing"

	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/lockstep"
)

func TestDomain(t *testing.T) {
	for _, tc := range []struct {
		name, key string
		meta      map[string]string
		want      string
	}{
		{"has it", "zone", map[string]string{"zone": "b", "rack": "r1"}, "zone=b"},
		{"has not", "zone", map[string]string{"rack": "r1"}, ""},
		{"empty value", "zone", map[string]string{"zone": ""}, ""},
		{"no meta", "zone", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Domain(tc.key, tc.meta); got != tc.want {
				t.Fatalf("Domain = %q, want %q", got, tc.want)
			}
		})
	}
}

// A waiter's domain is full by the nodes that use a slot in it: a holder
// or claim by the domain its grant recorded, a node down outside the line
// by the catalog's; a node of no domain never waits for one.
func TestSpreadWaits(t *testing.T) {
	spread := &hashspec.Spread{Key: "zone", Max: 1}
	holders := &lockstep.Holders{
		Holding: map[string]lockstep.Entry{"s2": {Name: "n2", Domain: "zone=b"}},
		Claims: map[string]lockstep.Claim{
			"n2": {Session: "s2", Domain: "zone=b"},
			"n5": {Session: "dead", Domain: "zone=c"},             // orphaned, counts
			"n7": {Session: "dead", Domain: "zone=d", Lost: true}, // lost, does not
		},
	}
	domains := map[string]string{"n1": "zone=a", "n2": "zone=b", "n3": "zone=a", "n4": "zone=b", "n6": "zone=c",
		"n8": "zone=d", "n9": "zone=e", "n10": "zone=e"}
	budget := func(users ...string) Budget {
		b := Budget{Limit: 3}
		for _, u := range users {
			b.Users = append(b.Users, SlotUser{Node: u})
		}
		return b
	}
	for _, tc := range []struct {
		name    string
		spread  *hashspec.Spread
		b       Budget
		waiting []string
		want    []DomainWait
	}{
		{"no spread", nil, budget("n2"), []string{"n4"}, nil},
		{"holder's domain", spread, budget("n2"), []string{"n1", "n4"},
			[]DomainWait{{Node: "n4", Domain: "zone=b", Used: []string{"n2"}, Max: 1}}},
		{"orphaned claim's domain", spread, budget("n5"), []string{"n6"},
			[]DomainWait{{Node: "n6", Domain: "zone=c", Used: []string{"n5"}, Max: 1}}},
		{"down outside the line", spread, budget("n9"), []string{"n10"},
			[]DomainWait{{Node: "n10", Domain: "zone=e", Used: []string{"n9"}, Max: 1}}},
		{"lost claim does not count", spread, budget(), []string{"n8"}, nil},
		{"no domain", spread, budget("n2"), []string{"n11"}, nil},
		{"room under max", &hashspec.Spread{Key: "zone", Max: 2}, budget("n2"), []string{"n4"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := SpreadWaits(tc.spread, tc.b, holders, domains, tc.waiting)
			if !slices.EqualFunc(got, tc.want, func(a, b DomainWait) bool {
				return a.Node == b.Node && a.Domain == b.Domain && a.Max == b.Max && slices.Equal(a.Used, b.Used)
			}) {
				t.Fatalf("SpreadWaits = %+v, want %+v", got, tc.want)
			}
		})
	}
}
