package fleetbench

import (
	"net/http"
	"strings"
	"testing"

	"github.com/rollagent/rollagent/coordinator"
)

// kv puts the key root of the group web, as coordinator names it, in place
// of "$g/".
var kv = strings.NewReplacer("$g/", webKeys().Root()).Replace

func webKeys() coordinator.Keys {
	k, err := coordinator.NewKeys(coordinator.DefaultPrefix, "web")
	if err != nil {
		panic(err)
	}
	return k
}

func TestBytesKindOf(t *testing.T) {
	tests := []struct {
		want  int
		paths []string
	}{
		{bytesGroup, []string{"/v1/kv/$g/"}},
		{bytesSlot, []string{"/v1/kv/$g/slot/", "/v1/kv/$g/slot/.holders", "/v1/kv/$g/slot/c/abc"}},
		{bytesOther, []string{"/v1/kv/$g/desired", "/v1/kv/$g/nodes/", "/v1/txn", "/v1/agent/self"}},
	}
	for _, tt := range tests {
		for _, path := range tt.paths {
			path = kv(path)
			t.Run(path, func(t *testing.T) {
				if got := bytesKindOf(path); got != tt.want {
					t.Fatalf("bytesKindOf(%q) = %d, want %d", path, got, tt.want)
				}
			})
		}
	}
}

// request is a request to the local Consul agent, with $g/ in url and body
// put as kv does.
func request(t *testing.T, method, url, body string) *http.Request {
	t.Helper()
	r, err := http.NewRequest(method, "http://127.0.0.1"+kv(url), strings.NewReader(kv(body)))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestJoinsLine(t *testing.T) {
	lock := `[{"KV":{"Verb":"delete","Key":"$g/slot/c/abc"}},{"KV":{"Verb":"lock","Key":"$g/slot/c/abc"}},` +
		`{"KV":{"Verb":"get-tree","Key":"$g/slot/.tail"}},{"KV":{"Verb":"set","Key":"$g/slot/.tail"}},` +
		`{"KV":{"Verb":"get-tree","Key":"$g/slot/.holders/abc"}},{"KV":{"Verb":"set","Key":"$g/nodes/n1"}}]`
	tests := []struct {
		name, method, url, body string
		want                    bool
	}{
		{"kv acquire of a contender key", "PUT", "/v1/kv/$g/slot/c/abc?acquire=s", "", true},
		{"kv acquire elsewhere", "PUT", "/v1/kv/$g/lock?acquire=s", "", false},
		{"txn joining the line", "PUT", "/v1/txn", lock, true},
		{"txn of a grant", "PUT", "/v1/txn", `[{"KV":{"Verb":"check-index","Key":"$g/desired"}}]`, false},
		{"txn that is not JSON", "PUT", "/v1/txn", `{`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := joinsLine(request(t, tt.method, tt.url, tt.body)); got != tt.want {
				t.Fatalf("joinsLine = %v, want %v", got, tt.want)
			}
		})
	}
}
