package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/testkit/groupkit"
)

// rolloutOf commits two specs to group as root, records the first as
// converged (where a rollback with no --to goes) and pauses the second, so
// that commit, cancel, resume and rollback would each write.
func rolloutOf(t *testing.T, srv *consultest.Server, group string) {
	t.Helper()
	v4 := writeSpec(t, "v4.json", []byte(`{"container": {"image": "rollagent-demo/web:v4"}}`))
	for _, f := range []string{"testdata/noname.json", v4} {
		if code, _, errs := runCLI(t, srv.HTTPAddr, "--token="+rootToken, "commit", group, "-f", f); code != 0 {
			t.Fatalf("root commit %s to %s: %s", f, group, errs)
		}
	}
	st := coordinator.NewStore(srv.Client(), "")
	gs, err := st.Read(t.Context(), group, nil)
	if err != nil {
		t.Fatal(err)
	}
	k, _ := st.Keys(group)
	conv, _ := json.Marshal(coordinator.Converged{SHA: gs.Desired.Previous, At: time.Now().UTC(), Nodes: 1})
	if _, err := srv.Client().KV().Put(&api.KVPair{Key: k.Converged(gs.Desired.Previous), Value: conv}, nil); err != nil {
		t.Fatal(err)
	}
	p := `{"sha":"` + gs.Desired.SHA + `","failures":1,"reason":"test","at":"` + time.Now().UTC().Format(time.RFC3339) + `"}`
	if _, err := srv.Client().KV().Put(&api.KVPair{Key: k.Pause(gs.Desired.SHA), Value: []byte(p)}, nil); err != nil {
		t.Fatal(err)
	}
}

// aclRollout is an ACL'd Consul (aclConsul) holding the rollout of group
// that rolloutOf leaves, and a client of it with the root token.
func aclRollout(t *testing.T, group string) (*consultest.Server, *api.Client) {
	t.Helper()
	srv := aclConsul(t)
	rolloutOf(t, srv, group)
	return srv, srv.Client()
}

// writes are the commands that change a group's KV; each would succeed
// with the rights it needs.
func writes(t *testing.T, group string) map[string][]string {
	v5 := writeSpec(t, "v5.json", []byte(`{"container": {"image": "rollagent-demo/web:v5"}}`))
	return map[string][]string{
		"commit":   {"commit", group, "-f", v5, "--author=op"},
		"cancel":   {"cancel", group, "--reason=test"},
		"resume":   {"resume", group},
		"rollback": {"rollback", group},
	}
}

// A token without the rights a command needs gets Consul's permission
// denied, naming what it lacks, and the command writes nothing at all: not
// even the keys the token may write.
func TestDeniedCommandsWriteNothing(t *testing.T) {
	srv, c := aclRollout(t, "web")
	k := groupkit.Keys(t, "web")
	tokens := map[string]string{
		"no policy": tokenWith(t, c, "nothing", `key_prefix "other/" { policy = "write" }`),
		"read only": tokenWith(t, c, "read", `key_prefix "rollagent/" { policy = "read" }`),
		// Each half of a two-key transaction, without the other half.
		"desired only": tokenWith(t, c, "desired", `key_prefix "rollagent/" { policy = "read" }
			key "`+k.Desired()+`" { policy = "write" }`),
		"all but desired": tokenWith(t, c, "nodesired", `key_prefix "`+k.Root()+`" { policy = "write" }
			key "`+k.Desired()+`" { policy = "read" }`),
	}
	for tname, tok := range tokens {
		for cmd, args := range writes(t, "web") {
			t.Run(tname+"/"+cmd, func(t *testing.T) {
				errs := refused(t, srv, "ermission denied", append([]string{"--token=" + tok}, args...)...)
				if !strings.Contains(errs, "rollagent/") && !strings.Contains(errs, "key:") && !strings.Contains(errs, "key ") {
					t.Fatalf("stderr %q does not name the key or right it lacks", errs)
				}
				t.Logf("refused: %s", strings.TrimSpace(errs))
			})
		}
	}
}

// An operator token scoped to one group can change nothing in another,
// even where that group has a rollout to cancel, pause, resume or roll
// back: no command, and no raw write of any of its keys, an operator's or
// an agent's.
func TestGroupTokenCannotTouchAnotherGroup(t *testing.T) {
	srv, c := aclRollout(t, "web")
	rolloutOf(t, srv, "api")
	webOp := tokenFor(t, c, "acl-operator.hcl", "web")
	cmds := writes(t, "api")
	cmds["pause"] = []string{"pause", "api", "--reason=test"}
	for cmd, args := range cmds {
		t.Run(cmd, func(t *testing.T) {
			refused(t, srv, "ermission denied", append([]string{"--token=" + webOp}, args...)...)
		})
	}
	gs, err := coordinator.NewStore(c, "").Read(t.Context(), "api", nil)
	if err != nil {
		t.Fatal(err)
	}
	opKV := clientWith(t, srv.HTTPAddr, webOp).KV()
	deniedTries(t, c, "web's operator token", putTries(opKV, append(operatorKeys(t, "api", gs.Desired.SHA), agentKeys(t, "api", gs.Desired.SHA)...)))
	// The same token can do each in its own group, so the refusals above are
	// about the group and not about the commands.
	own := writes(t, "web")
	for _, cmd := range []string{"resume", "rollback", "cancel", "commit"} {
		if code, _, errs := runCLI(t, srv.HTTPAddr, append([]string{"--token=" + webOp}, own[cmd]...)...); code != 0 {
			t.Fatalf("%s of its own group: %s", cmd, errs)
		}
	}
}
