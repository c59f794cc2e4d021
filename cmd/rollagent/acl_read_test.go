package main

import (
	"strings"
	"testing"

	"github.com/rollagent/rollagent/internal/testkit/groupkit"
)

// With default-deny ACLs, a token that may not read a group is told so,
// naming the key or prefix, and every command exits non-zero: Consul
// answers a denied read of one key with a 403, but filters a listing, and
// for a request with no token does not even say it filtered it. A token
// that may read an empty group still gets "nothing committed".
func TestDeniedReadsNameTheKey(t *testing.T) {
	srv, c := aclRollout(t, "web")
	apiOp := tokenFor(t, c, "acl-operator.hcl", "api")
	emptyOp := tokenFor(t, c, "acl-operator.hcl", "empty")
	spec := writeSpec(t, "v9.json", []byte(`{"container": {"image": "rollagent-demo/web:v9"}}`))
	commands := map[string][]string{
		"status":      {"status", "web"},
		"status json": {"status", "web", "-o", "json"},
		"history":     {"history", "web"},
		"cancel":      {"cancel", "web"},
		"resume":      {"resume", "web"},
		"rollback":    {"rollback", "web"},
		"commit":      {"commit", "web", "-f", spec},
		"plan":        {"plan", "web", "-f", spec},
	}
	for tname, tok := range map[string]string{"no token": "", "another group's token": apiOp} {
		for cname, args := range commands {
			t.Run(tname+"/"+cname, func(t *testing.T) {
				before := keys(t, c)
				code, out, errs := runCLI(t, srv.HTTPAddr, append([]string{"--token=" + tok}, args...)...)
				t.Logf("code %d: %s", code, strings.TrimSpace(errs))
				if code == 0 || !strings.Contains(errs, "permission denied") || !strings.Contains(errs, groupkit.Keys(t, "web").Root()) {
					t.Fatalf("code %d stdout %q stderr %q; want != 0, permission denied, and the key", code, out, errs)
				}
				if strings.Contains(out+errs, "nothing committed") {
					t.Fatalf("a denied read passes for nothing committed: %q %q", out, errs)
				}
				if after := keys(t, c); strings.Join(after, " ") != strings.Join(before, " ") {
					t.Fatalf("keys changed: %v -> %v", before, after)
				}
			})
		}
	}
	t.Run("readable empty group", func(t *testing.T) {
		for _, args := range [][]string{{"status", "empty"}, {"status", "empty", "-o", "json"}, {"history", "empty"}} {
			code, out, errs := runCLI(t, srv.HTTPAddr, append([]string{"--token=" + emptyOp}, args...)...)
			if code != 0 || strings.Contains(errs, "permission denied") {
				t.Fatalf("%v: code %d stdout %q stderr %q", args, code, out, errs)
			}
		}
	})
}
