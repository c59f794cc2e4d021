package agent_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// What a fleet's requests are for, in the order the report lists them: a
// node's requests over one rollout, from the commit to its release.
var fleetEndpoints = []string{
	"wait on desired (blocking: for a commit; the gate's watch)",
	"read desired",
	"txn: read the node's records",
	"register the service (state; session check)",
	"create the session",
	"txn: join the line (and write waiting)",
	"list the line (on joining)",
	"wait on the waiter ahead (blocking)",
	"head: read the holders",
	"head: wait on the holders (blocking)",
	"txn: grant (and write replacing)",
	"holder: watch its own key (blocking)",
	"txn: fence",
	"txn: release (and write converged)",
	"txn: leave the line",
	"remove the session check",
	"TTL check pass",
}

// endpointOf says what r is for, as one of fleetEndpoints, or its method
// and path with the names of groups, nodes and sessions left out.
func endpointOf(r *http.Request) string {
	path := r.URL.Path
	_, blocking := r.URL.Query()["index"]
	switch {
	case path == "/v1/txn":
		return txnEndpoint(txnOps(r))
	case r.Method == http.MethodPut && path == "/v1/agent/service/register":
		return "register the service (state; session check)"
	case r.Method == http.MethodPut && path == "/v1/session/create":
		return "create the session"
	case strings.HasPrefix(path, "/v1/agent/check/deregister/"):
		return "remove the session check"
	case fleetClassOf(path) == fleetLive:
		return "TTL check pass"
	case r.Method != http.MethodGet || !strings.HasPrefix(path, "/v1/kv/"):
	case strings.HasSuffix(path, "/desired") && blocking:
		return "wait on desired (blocking: for a commit; the gate's watch)"
	case strings.HasSuffix(path, "/desired"):
		return "read desired"
	case strings.HasSuffix(path, "/slot/"):
		return "list the line (on joining)"
	case strings.HasSuffix(path, "/slot/.holders"):
		if blocking {
			return "head: wait on the holders (blocking)"
		}
		return "head: read the holders"
	case strings.Contains(path, "/slot/.holders/") && blocking:
		return "holder: watch its own key (blocking)"
	case strings.Contains(path, "/slot/c/") && blocking:
		return "wait on the waiter ahead (blocking)"
	}
	return r.Method + " " + anonymous(path)
}

// anonymous drops what follows a prefix that names a group, node or
// session, so that one kind of request has one label.
func anonymous(path string) string {
	segs := strings.Split(path, "/")
	for i := 1; i < len(segs); i++ {
		switch segs[i-1] {
		case "groups", "nodes", "c", ".holders", "deregister", "pass", "update", "destroy", "info":
			segs[i] = "*"
		}
	}
	return strings.Join(segs, "/")
}

type txnOp struct{ KV *struct{ Verb, Key string } }

// txnOps decodes the KV ops of a /v1/txn request, or returns nil.
func txnOps(r *http.Request) []txnOp {
	if r.GetBody == nil {
		return nil
	}
	body, err := r.GetBody()
	if err != nil {
		return nil
	}
	defer body.Close()
	var ops []txnOp
	if json.NewDecoder(body).Decode(&ops) != nil {
		return nil
	}
	return slices.DeleteFunc(ops, func(o txnOp) bool { return o.KV == nil })
}

// txnEndpoint tells lockstep's and the store's transactions apart by their
// ops.
func txnEndpoint(ops []txnOp) string {
	has := func(verb, keyPart string) bool {
		return slices.ContainsFunc(ops, func(o txnOp) bool { return o.KV.Verb == verb && strings.Contains(o.KV.Key, keyPart) })
	}
	switch {
	case len(ops) == 0:
		return "txn: not JSON"
	case has("set", "/slot/.tail"):
		return "txn: join the line (and write waiting)"
	case has("get-tree", ""):
		return "txn: read the node's records"
	case has("lock", "/slot/.holders/"):
		return "txn: grant (and write replacing)"
	case has("delete", "/slot/.holders/"):
		return "txn: release (and write converged)"
	case has("check-session", "/slot/.holders/"):
		return "txn: fence"
	case has("delete", "/slot/c/"):
		return "txn: leave the line"
	}
	return "txn: other"
}

// endpointTable is the requests per node by what they are for, one column
// per row of the report.
func endpointTable(rows []*fleetResult) string {
	seen := map[string]bool{}
	for _, r := range rows {
		for e := range r.endpoints {
			seen[e] = true
		}
	}
	var order []string
	for _, e := range fleetEndpoints {
		if seen[e] {
			order = append(order, e)
			delete(seen, e)
		}
	}
	rest := make([]string, 0, len(seen))
	for e := range seen {
		rest = append(rest, e)
	}
	slices.Sort(rest)
	order = append(order, rest...)
	var sb strings.Builder
	sb.WriteString("| Request, per node |")
	for _, r := range rows {
		fmt.Fprintf(&sb, " N=%d K=%d %s |", r.n, r.k, r.consulName(false))
	}
	sb.WriteString("\n|---|" + strings.Repeat("---:|", len(rows)) + "\n")
	for _, e := range order {
		sb.WriteString("| " + e + " |")
		for _, r := range rows {
			fmt.Fprintf(&sb, " %.2f |", r.perNode(r.endpoints[e]))
		}
		sb.WriteString("\n")
	}
	return sb.String()
}

func TestEndpointOf(t *testing.T) {
	grant := `[{"KV":{"Verb":"check-index","Key":"rollagent/groups/web/desired"}},{"KV":{"Verb":"check-session","Key":"rollagent/groups/web/slot/c/s1"}},` +
		`{"KV":{"Verb":"cas","Key":"rollagent/groups/web/slot/.holders"}},{"KV":{"Verb":"lock","Key":"rollagent/groups/web/slot/.holders/s1"}}]`
	release := `[{"KV":{"Verb":"delete","Key":"rollagent/groups/web/slot/.holders/s1"}},{"KV":{"Verb":"delete","Key":"rollagent/groups/web/slot/c/s1"}}]`
	join := `[{"KV":{"Verb":"delete","Key":"rollagent/groups/web/slot/c/s1"}},{"KV":{"Verb":"lock","Key":"rollagent/groups/web/slot/c/s1"}},` +
		`{"KV":{"Verb":"get-tree","Key":"rollagent/groups/web/slot/.tail"}},{"KV":{"Verb":"set","Key":"rollagent/groups/web/slot/.tail"}},` +
		`{"KV":{"Verb":"get-tree","Key":"rollagent/groups/web/slot/.holders/s1"}},{"KV":{"Verb":"set","Key":"rollagent/groups/web/nodes/n1"}}]`
	tests := []struct {
		name, method, url, body, want string
	}{
		{"commit wait", "GET", "/v1/kv/rollagent/groups/web/desired?index=12", "", "wait on desired (blocking: for a commit; the gate's watch)"},
		{"desired", "GET", "/v1/kv/rollagent/groups/web/desired", "", "read desired"},
		{"line", "GET", "/v1/kv/rollagent/groups/web/slot/?recurse=", "", "list the line (on joining)"},
		{"holders", "GET", "/v1/kv/rollagent/groups/web/slot/.holders?recurse=", "", "head: read the holders"},
		{"holders blocking", "GET", "/v1/kv/rollagent/groups/web/slot/.holders?recurse=&index=5", "", "head: wait on the holders (blocking)"},
		{"own key", "GET", "/v1/kv/rollagent/groups/web/slot/.holders/s1?index=5", "", "holder: watch its own key (blocking)"},
		{"ahead", "GET", "/v1/kv/rollagent/groups/web/slot/c/s0?index=5", "", "wait on the waiter ahead (blocking)"},
		{"grant", "PUT", "/v1/txn", grant, "txn: grant (and write replacing)"},
		{"release", "PUT", "/v1/txn", release, "txn: release (and write converged)"},
		{"join", "PUT", "/v1/txn", join, "txn: join the line (and write waiting)"},
		{"records", "PUT", "/v1/txn", `[{"KV":{"Verb":"get-tree","Key":"rollagent/groups/web/nodes/n1"}}]`, "txn: read the node's records"},
		{"garbled txn", "PUT", "/v1/txn", `{`, "txn: not JSON"},
		{"check removed", "PUT", "/v1/agent/check/deregister/rollagent-web-n1-session-ab", "", "remove the session check"},
		{"other", "GET", "/v1/kv/rollagent/groups/web/nodes/n1", "", "GET /v1/kv/rollagent/groups/*/nodes/*"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := http.NewRequest(tt.method, "http://127.0.0.1"+tt.url, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			if got := endpointOf(r); got != tt.want {
				t.Fatalf("endpointOf = %q, want %q", got, tt.want)
			}
		})
	}
}
