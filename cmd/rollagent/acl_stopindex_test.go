package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/testkit"
)

// With the documented agent policy, an agent that stops cleanly writes its
// stop mark with its index key, and its head of the line writes the mark
// of Down's full read; with a policy from before those two rules, it
// works as before: it says so once, writes its mark alone, and its records
// say it keeps no index (StopIndex off), so that Down reads every record.
func TestAgentPolicyStopIndex(t *testing.T) {
	cases := []struct {
		name    string
		old     bool // the policy without the stopped/ and downcheck rules
		indexed bool
	}{
		{"documented policy", false, true},
		{"policy from before the stop index", true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := aclConsul(t)
			c := srv.Client()
			rules := policyRules(t, c, "acl-policy.hcl", "web", "n1")
			if tc.old {
				rule := regexp.MustCompile(`key "[^"]*/(stopped/n1|downcheck)" \{\s*policy = "write"\s*\}`)
				if rules = rule.ReplaceAllString(rules, ""); regexp.MustCompile(`key "[^"]*/(stopped/|downcheck)`).MatchString(rules) {
					t.Fatalf("the rules still name the new keys:\n%s", rules)
				}
			}
			logs := runAgentToConvergence(t, srv, tokenWith(t, c, "agent-n1", rules))
			st := coordinator.NewStore(c, "")
			k, _ := st.Keys("web")
			gs, err := st.Read(t.Context(), "web", nil)
			if err != nil {
				t.Fatal(err)
			}
			n := gs.Nodes[0]
			if n.Stopped == nil || n.StopIndex != tc.indexed {
				t.Fatalf("n1's record after a clean stop: stopped %v, stop_index %v; want a mark, stop_index %v", n.Stopped, n.StopIndex, tc.indexed)
			}
			for _, key := range []string{k.Stopped("n1"), k.DownCheck()} {
				if p, _, err := c.KV().Get(key, nil); err != nil || (p != nil) != tc.indexed {
					t.Errorf("%s: %v, %v; want it there: %v", key, p, err, tc.indexed)
				}
			}
			warned := strings.Count(logs, "may not write this node's stop index")
			if want := map[bool]int{true: 0, false: 1}[tc.indexed]; warned != want {
				t.Errorf("the agent warned %d times of its stop index, want %d; its log:\n%s", warned, want, logs)
			}
		})
	}
}

// runAgentToConvergence runs `rollagent run` for node n1 of group web with
// token, commits testdata/web.json, and stops the agent once it has
// converged: its log.
func runAgentToConvergence(t *testing.T, srv *consultest.Server, token string) string {
	t.Helper()
	return runAgentToConvergenceThen(t, srv, token, nil)
}

// runAgentToConvergenceThen is runAgentToConvergence that calls converged,
// if not nil, with the agent's log so far, before it stops the agent.
func runAgentToConvergenceThen(t *testing.T, srv *consultest.Server, token string, converged func(logs string)) string {
	t.Helper()
	addr := srv.HTTPAddr
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	done := make(chan int, 1)
	logs := &testkit.Buffer{} // read while the agent writes, by converged
	go func() {
		done <- run(ctx, []string{"--consul-addr=" + addr, "--token=" + token, "run", "--group=web", "--node=n1",
			"--runtime=exec", "--state-dir=" + dir, "--replace-cmd=sh", "--replace-cmd=-c",
			"--replace-cmd=cp \"$ROLLAGENT_SPEC\" " + dir + "/installed.json",
			"--health-cmd=test", "--health-cmd=-f", "--health-cmd=" + dir + "/installed.json"}, logs, logs)
	}()
	if code, _, errs := runCLI(t, addr, "--token="+rootToken, "commit", "web", "-f", "testdata/web.json"); code != 0 {
		t.Fatal(errs)
	}
	st := coordinator.NewStore(srv.Client(), "")
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if gs, err := st.Read(ctx, "web", nil); err == nil && gs.Progress().Done {
			if converged != nil {
				converged(logs.String())
			}
			cancel()
			if code := <-done; code != 0 {
				t.Fatalf("agent exited %d: %s", code, logs.String())
			}
			return logs.String()
		}
		time.Sleep(200 * time.Millisecond)
	}
	cancel()
	<-done
	t.Fatalf("the agent did not converge; its log:\n%s", logs.String())
	return ""
}
