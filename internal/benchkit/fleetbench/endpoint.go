package fleetbench

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// What a fleet's requests are for, in the order the report lists them: a
// node's requests over one rollout, from the commit to its release.
var fleetEndpoints = []string{
	"wait on desired (blocking: for a commit; the gate's watch)",
	"read desired",
	"txn: read the node's records",
	"read the local alive instance (before a registration)",
	"register the service (state; session check)",
	"create the session",
	"txn: join the line (and write waiting)",
	"list the line (on joining)",
	"wait on the waiter ahead (blocking)",
	"head: read the holders",
	"head: wait on the holders (blocking)",
	"txn: head: read the records of the nodes down",
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
	case r.Method == http.MethodGet && strings.HasPrefix(path, "/v1/agent/service/"):
		return "read the local alive instance (before a registration)"
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
	case has("get", "/nodes/"):
		return "txn: head: read the records of the nodes down"
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
