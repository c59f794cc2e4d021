package main

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
)

// The shipped agent policy, made for node n1 of group web, lets the agent
// write what an agent writes (its node's record, the slot, a failure and
// its action, an event), but no operator command: commit, rollback,
// resume and cancel are refused with permission denied, exit non-zero and
// change nothing in KV. Neither may it write another node's record. The
// read-only status policy changes nothing either.
func TestAgentTokenCannotCommitOrCancel(t *testing.T) {
	srv, c := aclRollout(t, "web")
	n1 := tokenForNode(t, c, "acl-policy.hcl", "web", "n1")
	agentClient := clientWith(t, srv.HTTPAddr, n1)
	agentStore := coordinator.NewStore(agentClient, "")
	ctx := t.Context()
	gs, err := coordinator.NewStore(c, "").Read(ctx, "web", nil)
	if err != nil {
		t.Fatal(err)
	}
	k, _ := agentStore.Keys("web")

	agentWrites := map[string]func() error{
		"its node's record": func() error {
			return agentStore.PutNode(ctx, "web", coordinator.NodeState{Node: "n1", State: coordinator.StateWaiting, Since: time.Now()})
		},
		"a failure": func() error {
			_, err := agentStore.RecordFailure(ctx, "web", "n1", gs.Desired.SHA, "unhealthy")
			return err
		},
		"the slot": func() error {
			_, err := agentClient.KV().Put(&api.KVPair{Key: k.Slot() + ".tail", Value: []byte("x")}, nil)
			return err
		},
	}
	for name, write := range agentWrites {
		t.Run("agent writes "+name, func(t *testing.T) {
			if err := write(); err != nil {
				t.Fatal(err)
			}
		})
	}
	t.Run("another node's record", func(t *testing.T) {
		err := agentStore.PutNode(ctx, "web", coordinator.NodeState{Node: "n2", State: coordinator.StateConverged, Since: time.Now()})
		if err == nil || !strings.Contains(strings.ToLower(err.Error()), "permission denied") {
			t.Fatalf("n1's token wrote n2's record: %v", err)
		}
		if p, _, _ := c.KV().Get(k.Node("n2"), nil); p != nil {
			t.Fatalf("n2's record exists: %s", p.Value)
		}
	})
	// A removal mark takes a node out of the count of nodes down: a stolen
	// agent token must not be able to write one for a node that is down.
	t.Run("a removal mark", func(t *testing.T) {
		_, err := agentClient.KV().Put(&api.KVPair{Key: k.Removed("n2"), Value: []byte(`{"node":"n2"}`)}, nil)
		if err == nil || !strings.Contains(strings.ToLower(err.Error()), "permission denied") {
			t.Fatalf("n1's token wrote a removal mark for n2: %v", err)
		}
	})
	tokens := map[string]string{"agent": n1, "status": tokenFor(t, c, "acl-status.hcl", "web")}
	for tname, tok := range tokens {
		for cmd, args := range writes(t, "web") {
			t.Run(tname+" token "+cmd, func(t *testing.T) {
				errs := refused(t, srv, "ermission denied", append([]string{"--token=" + tok}, args...)...)
				t.Logf("refused: %s", strings.TrimSpace(errs))
			})
		}
		t.Run(tname+" token reads status and history, and plans", func(t *testing.T) {
			for _, args := range [][]string{{"status", "web"}, {"history", "web"}} {
				if code, out, errs := runCLI(t, srv.HTTPAddr, append([]string{"--token=" + tok}, args...)...); code != 0 {
					t.Fatalf("%v: code %d, out %q, stderr %q", args, code, out, errs)
				}
			}
			spec := writeSpec(t, "plan.json", []byte(`{"container": {"image": "rollagent-demo/web:plan"}}`))
			before := kvSnapshot(t, c)
			code, out, errs := runCLI(t, srv.HTTPAddr, "--token="+tok, "plan", "web", "-f", spec)
			if code != exitChanges || !strings.Contains(out, "container.image: ") {
				t.Fatalf("plan: code %d, out %q, stderr %q", code, out, errs)
			}
			kvUnchanged(t, c, before)
		})
	}
	// failure_action=rollback needs no more than the agent's token has. It
	// goes back only to a SHA that converged on every node: n1 converges
	// on v5 before v6 is committed.
	t.Run("agent's automatic rollback", func(t *testing.T) {
		v5 := writeSpec(t, "v5c.json", []byte(`{"container": {"image": "rollagent-demo/web:v5c"}}`))
		code, out, errs := runCLI(t, srv.HTTPAddr, "--token="+rootToken, "commit", "web", "-f", v5)
		if code != 0 {
			t.Fatal(errs)
		}
		good := strings.SplitN(out, "\n", 2)[0]
		root := coordinator.NewStore(c, "")
		if err := root.PutNode(ctx, "web", coordinator.NodeState{Node: "n1", SHA: good, Desired: good, State: coordinator.StateConverged, Since: time.Now()}); err != nil {
			t.Fatal(err)
		}
		v6 := writeSpec(t, "v6.json", []byte(`{"container": {"image": "rollagent-demo/web:v6"}, "update": {"failure_action": "rollback", "max_failures": 1}}`))
		code, out, errs = runCLI(t, srv.HTTPAddr, "--token="+rootToken, "commit", "web", "-f", v6)
		if code != 0 {
			t.Fatal(errs)
		}
		sha := strings.SplitN(out, "\n", 2)[0]
		if a, err := agentStore.RecordFailure(ctx, "web", "n1", sha, "unhealthy"); err != nil || a != coordinator.ActionRollback {
			t.Fatalf("RecordFailure with the agent's token: %v, %v; want a rollback", a, err)
		}
		log, err := agentStore.Events(ctx, "web")
		if err != nil || len(log.Events) == 0 || log.Events[len(log.Events)-1].Kind != coordinator.EventAutoRollback {
			t.Fatalf("log after the rollback: %+v, %v", log, err)
		}
	})
}

// The read-only status policy changes nothing either, beyond what
// TestAgentTokenCannotCommitOrCancel runs with it: `rollagent pause`,
// `promote` and `node rm` exit non-zero saying permission denied, and no
// raw write or delete of the group's keys goes through, an agent's or an
// operator's; Consul keeps nothing of any try. The operator's token then
// runs each command, so the refusals are about the token.
func TestStatusTokenCannotWrite(t *testing.T) {
	srv, c, root := aclRoot(t)
	gs := canaryRollout(t, srv, root)
	k, _ := root.Keys("web")
	sha := gs.Desired.SHA
	status := tokenFor(t, c, "acl-status.hcl", "web")
	statusKV := clientWith(t, srv.HTTPAddr, status).KV()
	commands := map[string][]string{
		"pause":   {"pause", "web", "--reason=stop"},
		"promote": {"promote", "web"},
		"node rm": {"node", "rm", "web", "n2", "--force"},
	}
	tries := putTries(statusKV, append(agentKeys(t, "web", sha), operatorKeys(t, "web", sha)...))
	tries["delete desired"] = func() error { _, err := statusKV.Delete(k.Desired(), nil); return err }
	tries["delete n2's record"] = func() error { _, err := statusKV.Delete(k.Node("n2"), nil); return err }
	tries["delete the group"] = func() error { _, err := statusKV.DeleteTree(k.Root(), nil); return err }
	for name, args := range commands {
		tries["rollagent "+name] = func() error {
			return errorString(refused(t, srv, "ermission denied", append([]string{"--token=" + status}, args...)...))
		}
	}
	deniedTries(t, c, "the status token", tries)
	op := tokenFor(t, c, "acl-operator.hcl", "web")
	for _, name := range []string{"promote", "node rm", "pause"} {
		if code, _, errs := runCLI(t, srv.HTTPAddr, append([]string{"--token=" + op}, commands[name]...)...); code != 0 {
			t.Errorf("%s with the operator's token: code %d, stderr %q", name, code, errs)
		}
	}
}

// storeWith is a store on addr with token.
func storeWith(t *testing.T, addr, token string) *coordinator.Store {
	t.Helper()
	return coordinator.NewStore(clientWith(t, addr, token), "")
}

// clientWith is a Consul client of addr with token.
func clientWith(t *testing.T, addr, token string) *api.Client {
	t.Helper()
	c, err := api.NewClient(&api.Config{Address: addr, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
