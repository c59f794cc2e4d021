package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/testkit/groupkit"
)

const rootToken = "8e5a0a1c-0000-4000-8000-00000000root"

// aclConsul is a dev agent with default-deny ACLs; its client has the root
// token.
func aclConsul(t *testing.T) *consultest.Server {
	t.Helper()
	return consultest.New(t, consultest.Options{Token: rootToken,
		HCL: `acl { enabled = true default_policy = "deny" tokens { initial_management = "` + rootToken + `" agent = "` + rootToken + `" } }`})
}

// aclRoot is aclConsul, its root client and a store on that client.
func aclRoot(t *testing.T) (*consultest.Server, *api.Client, *coordinator.Store) {
	t.Helper()
	srv := aclConsul(t)
	c := srv.Client()
	return srv, c, coordinator.NewStore(c, "")
}

// tokenFor makes a token with the policy in file (under docs/examples),
// optionally rewriting "web" to group, for node n1.
func tokenFor(t *testing.T, c *api.Client, file, group string) string {
	t.Helper()
	return tokenForNode(t, c, file, group, "n1")
}

// tokenForNode makes a token with the policy in file, its placeholders
// rewritten as the file says to: group "web", node "n1", and the session
// rule's Consul node name, here that of c's agent.
func tokenForNode(t *testing.T, c *api.Client, file, group, node string) string {
	t.Helper()
	return tokenWith(t, c, strings.TrimSuffix(file, ".hcl")+"-"+group+"-"+node, policyRules(t, c, file, group, node))
}

// policyRules are the rules of the policy in file, rewritten as
// tokenForNode says.
func policyRules(t *testing.T, c *api.Client, file, group, node string) string {
	t.Helper()
	rules := shippedPolicy(t, file)
	consulNode, err := c.Agent().NodeName()
	if err != nil {
		t.Fatal(err)
	}
	return strings.NewReplacer(
		`"`+groupkit.Keys(t, "web").Root(), `"`+groupkit.Keys(t, group).Root(),
		`nodes/n1"`, `nodes/`+node+`"`,
		`stopped/n1"`, `stopped/`+node+`"`,
		`events/node/n1/"`, `events/node/`+node+`/"`,
		`slot/.holders/n1/"`, `slot/.holders/`+node+`/"`,
		`slot/c/n1/"`, `slot/c/`+node+`/"`,
		`session "n1"`, `session "`+consulNode+`"`,
		`agent "n1"`, `agent "`+consulNode+`"`,
		`service "rollagent-web"`, `service "rollagent-`+group+`"`,
	).Replace(rules)
}

// shippedPolicy is the policy in file under docs/examples, as shipped.
func shippedPolicy(t *testing.T, file string) string {
	t.Helper()
	rules, err := os.ReadFile(filepath.Join("..", "..", "docs", "examples", file))
	if err != nil {
		t.Fatal(err)
	}
	return string(rules)
}

// tokenWith makes a token with rules as its only policy, named name.
func tokenWith(t *testing.T, c *api.Client, name, rules string) string {
	t.Helper()
	p, _, err := c.ACL().PolicyCreate(&api.ACLPolicy{Name: name, Rules: rules}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tok, _, err := c.ACL().TokenCreate(&api.ACLToken{Policies: []*api.ACLTokenPolicyLink{{ID: p.ID}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tok.SecretID
}

func TestOperatorPolicyIsScopedToItsGroup(t *testing.T) {
	srv := aclConsul(t)
	c := srv.Client()
	webOp := tokenFor(t, c, "acl-operator.hcl", "web")
	tests := []struct {
		name, token, group string
		ok                 bool
	}{
		{"own group", webOp, "web", true},
		{"another group", webOp, "api", false},
		{"no token", "", "web", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errs := runCLI(t, srv.HTTPAddr, "--token="+tc.token, "commit", tc.group, "-f", "testdata/noname.json", "--author=op")
			if tc.ok != (code == 0) {
				t.Fatalf("commit to %s: code %d, stderr %q", tc.group, code, errs)
			}
			if !tc.ok && !strings.Contains(strings.ToLower(errs), "permission denied") {
				t.Fatalf("stderr %q does not say permission denied", errs)
			}
			if !tc.ok {
				t.Logf("refused: %s", strings.TrimSpace(errs))
			}
		})
	}
	// desired, history and the commit's event, of web only
	k := groupkit.Keys(t, "web")
	if ks := keys(t, c); len(ks) != 3 || !strings.HasPrefix(ks[1], k.EventsPrefix()) || !strings.HasPrefix(ks[2], k.HistoryPrefix()) {
		t.Fatalf("keys after the commits: %v", ks)
	}
	if code, _, errs := runCLI(t, srv.HTTPAddr, "--token="+webOp, "cancel", "api"); code == 0 || !strings.Contains(strings.ToLower(errs), "permission denied") {
		t.Fatalf("cancel of another group: code %d, stderr %q", code, errs)
	}
}

// The documented agent policy is enough for `rollagent run` to converge.
func TestAgentPolicyIsEnough(t *testing.T) {
	srv := aclConsul(t)
	c := srv.Client()
	runAgentToConvergence(t, srv, tokenFor(t, c, "acl-policy.hcl", "web"))
	gs, err := coordinator.NewStore(c, "").Read(t.Context(), "web", nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := gs.Nodes[0]; n.ConsulNode != srv.Name {
		t.Errorf("n1's record names Consul node %q, want %q: the policy must let the agent read it", n.ConsulNode, srv.Name)
	}
}
