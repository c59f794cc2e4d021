package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/testkit"
	"github.com/rollagent/rollagent/internal/testkit/groupkit"
)

// The shipped agent policy lets an agent record that a progress deadline
// passed and apply failure_action (pause, rollback) from it; the record is
// not under the operators' brakes/, and without the policy's line for it
// the write is refused.
func TestAgentPolicyFiresTheDeadline(t *testing.T) {
	srv, c, root := aclRoot(t)
	ctx := testkit.Context(t, time.Minute)
	commitDeadline := func(group, image, action string) *coordinator.GroupState {
		t.Helper()
		s := jsonSpec(t, `{"container":{"image":"`+image+`"},"update":{"failure_action":"`+action+`","progress_deadline":"1h"}}`)
		if _, err := root.Commit(ctx, group, s, "op", "deadline"); err != nil {
			t.Fatal(err)
		}
		gs, err := root.Read(ctx, group, nil)
		if err != nil {
			t.Fatal(err)
		}
		return gs
	}
	for _, action := range []string{"pause", "rollback", "continue"} {
		t.Run(action, func(t *testing.T) {
			group := "dl-" + action
			commitDeadline(group, "demo:v1", "pause")
			if err := root.PutNode(ctx, group, coordinator.NodeState{Node: "n9", SHA: "", State: coordinator.StateWaiting, Since: time.Now()}); err != nil {
				t.Fatal(err)
			}
			gs := commitDeadline(group, "demo:v2", action)
			k := groupkit.Keys(t, group)
			if strings.HasPrefix(k.Deadline(gs.Desired.SHA), k.BrakesPrefix()) {
				t.Fatalf("%s is under the operators' brakes/", k.Deadline(gs.Desired.SHA))
			}
			agentSt := storeWith(t, srv.HTTPAddr, tokenFor(t, c, "acl-policy.hcl", group))
			fired, _, err := agentSt.FireDeadline(ctx, group, "n1", gs.Desired.SHA, gs.Desired.CommittedAt)
			if err != nil || !fired {
				t.Fatalf("the agent's token: fired %v, %v", fired, err)
			}
			after, err := root.Read(ctx, group, nil)
			if err != nil {
				t.Fatal(err)
			}
			if after.Deadline == nil && after.Desired.Previous != gs.Desired.SHA {
				t.Fatalf("no record and no rollback after the agent fired: %+v", after.Desired)
			}
		})
	}
	t.Run("without the policy's line", func(t *testing.T) {
		rules := shippedPolicy(t, "acl-policy.hcl")
		web := groupkit.Keys(t, "web")
		line := fmt.Sprintf("key_prefix %q {\n  policy = \"write\"\n}\n", web.Deadline(""))
		if !strings.Contains(rules, line) {
			t.Fatalf("the shipped policy has no line for deadline/")
		}
		group := "dl-none"
		commitDeadline(group, "demo:v2", "continue")
		gs, _ := root.Read(ctx, group, nil)
		without := strings.ReplaceAll(strings.Replace(rules, line, "", 1), `"`+web.Root(), `"`+groupkit.Keys(t, group).Root())
		st := storeWith(t, srv.HTTPAddr, tokenWith(t, c, "no-deadline", without))
		if fired, _, err := st.FireDeadline(ctx, group, "n1", gs.Desired.SHA, gs.Desired.CommittedAt); fired || err == nil ||
			!strings.Contains(err.Error(), "ermission denied") {
			t.Fatalf("without deadline/: fired %v, %v; want permission denied", fired, err)
		}
	})
}
