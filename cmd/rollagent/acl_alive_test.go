package main

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/testkit"
)

// With the documented agent policy, the agent's liveness check, which its
// session is bound to, is on its own instance of the service "rollagent",
// and its group's service shows it through an alias check; with a policy
// from before that service's rule, the agent works as before: it says so
// once and puts the check on its group's service.
func TestAgentPolicyAliveInstance(t *testing.T) {
	cases := []struct {
		name string
		old  bool // the policy without the service "rollagent" rule
	}{
		{"documented policy", false},
		{"policy from before the alive instance", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := aclConsul(t)
			c := srv.Client()
			rules := policyRules(t, c, "acl-policy.hcl", "web", "n1")
			if tc.old {
				rule := regexp.MustCompile(`service "` + coordinator.AliveServiceName + `" \{\s*policy = "write"\s*\}`)
				if rules = rule.ReplaceAllString(rules, ""); regexp.MustCompile(`(?m)^service "` + coordinator.AliveServiceName + `"`).MatchString(rules) {
					t.Fatalf("the rules still name the service:\n%s", rules)
				}
			}
			logs := runAgentToConvergenceThen(t, srv, tokenWith(t, c, "agent-n1", rules), func(string) {
				want := coordinator.AliveServiceID("web", "n1")
				if tc.old {
					want = coordinator.ServiceID("web", "n1")
				}
				var why string
				if !testkit.PollEvery(10*time.Second, 100*time.Millisecond, func() bool {
					why = aliveCheckOn(c, want, !tc.old)
					return why == ""
				}) {
					t.Fatal(why)
				}
			})
			warned := strings.Count(logs, "may not register the service "+coordinator.AliveServiceName)
			if want := map[bool]int{true: 1, false: 0}[tc.old]; warned != want {
				t.Errorf("the agent warned %d times of the alive instance, want %d; its log:\n%s", warned, want, logs)
			}
		})
	}
}

// aliveCheckOn says how n1's session's check is not an HTTP check on the
// service instance serviceID, passing, or how the group's service lacks a
// passing alias of it (when alias), "" if neither.
func aliveCheckOn(c *api.Client, serviceID string, alias bool) string {
	ss, _, err := c.Session().List(nil)
	if err != nil || len(ss) != 1 {
		return fmt.Sprintf("sessions %v (%v), want one", ss, err)
	}
	checks, err := c.Agent().Checks()
	if err != nil {
		return err.Error()
	}
	var bound *api.AgentCheck
	for _, id := range ss[0].NodeChecks {
		if id != "serfHealth" {
			bound = checks[id]
		}
	}
	if bound == nil || bound.ServiceID != serviceID || bound.Type != "http" || bound.Status != api.HealthPassing {
		return "the session's check: " + checkString(bound) + "; want an HTTP check of " + serviceID + ", passing"
	}
	if !alias {
		return ""
	}
	a := checks[coordinator.AliveAliasCheckID("web", "n1")]
	if a == nil || a.ServiceID != coordinator.ServiceID("web", "n1") || a.Type != "alias" || a.Status != api.HealthPassing {
		return "the group service's alias: " + checkString(a) + "; want an alias check, passing"
	}
	return ""
}

func checkString(c *api.AgentCheck) string {
	if c == nil {
		return "none"
	}
	return c.CheckID + " of " + c.ServiceID + " (" + c.Type + ", " + c.Status + ")"
}
