package fleetbench

import (
	"testing"

	"github.com/rollagent/rollagent/coordinator"
)

func TestEndpointOf(t *testing.T) {
	grant := `[{"KV":{"Verb":"check-index","Key":"$g/desired"}},{"KV":{"Verb":"check-session","Key":"$g/slot/c/s1"}},` +
		`{"KV":{"Verb":"cas","Key":"$g/slot/.holders"}},{"KV":{"Verb":"lock","Key":"$g/slot/.holders/s1"}}]`
	release := `[{"KV":{"Verb":"delete","Key":"$g/slot/.holders/s1"}},{"KV":{"Verb":"delete","Key":"$g/slot/c/s1"}}]`
	join := `[{"KV":{"Verb":"delete","Key":"$g/slot/c/s1"}},{"KV":{"Verb":"lock","Key":"$g/slot/c/s1"}},` +
		`{"KV":{"Verb":"get-tree","Key":"$g/slot/.tail"}},{"KV":{"Verb":"set","Key":"$g/slot/.tail"}},` +
		`{"KV":{"Verb":"get-tree","Key":"$g/slot/.holders/s1"}},{"KV":{"Verb":"set","Key":"$g/nodes/n1"}}]`
	tests := []struct {
		name, method, url, body, want string
	}{
		{"commit wait", "GET", "/v1/kv/$g/desired?index=12", "", "wait on desired (blocking: for a commit; the gate's watch)"},
		{"desired", "GET", "/v1/kv/$g/desired", "", "read desired"},
		{"line", "GET", "/v1/kv/$g/slot/?recurse=", "", "list the line (on joining)"},
		{"holders", "GET", "/v1/kv/$g/slot/.holders?recurse=", "", "head: read the holders"},
		{"holders blocking", "GET", "/v1/kv/$g/slot/.holders?recurse=&index=5", "", "head: wait on the holders (blocking)"},
		{"own key", "GET", "/v1/kv/$g/slot/.holders/s1?index=5", "", "holder: watch its own key (blocking)"},
		{"ahead", "GET", "/v1/kv/$g/slot/c/s0?index=5", "", "wait on the waiter ahead (blocking)"},
		{"grant", "PUT", "/v1/txn", grant, "txn: grant (and write replacing)"},
		{"release", "PUT", "/v1/txn", release, "txn: release (and write converged)"},
		{"join", "PUT", "/v1/txn", join, "txn: join the line (and write waiting)"},
		{"records", "PUT", "/v1/txn", `[{"KV":{"Verb":"get-tree","Key":"$g/nodes/n1"}}]`, "txn: read the node's records"},
		{"records of nodes down", "PUT", "/v1/txn", `[{"KV":{"Verb":"get","Key":"$g/nodes/n1"}},{"KV":{"Verb":"get","Key":"$g/nodes/n2"}}]`, "txn: head: read the records of the nodes down"},
		{"garbled txn", "PUT", "/v1/txn", `{`, "txn: not JSON"},
		{"alive instance", "GET", "/v1/agent/service/rollagent-web-n1:alive", "", "read the local alive instance (before a registration)"},
		{"check removed", "PUT", "/v1/agent/check/deregister/rollagent-web-n1-session-ab", "", "remove the session check"},
		{"other", "GET", "/v1/kv/$g/nodes/n1", "", "GET /v1/kv/" + coordinator.DefaultPrefix + "groups/*/nodes/*"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := endpointOf(request(t, tt.method, tt.url, tt.body)); got != tt.want {
				t.Fatalf("endpointOf = %q, want %q", got, tt.want)
			}
		})
	}
}
