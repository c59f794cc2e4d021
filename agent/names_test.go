package agent_test

import (
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/coordinator"
)

// badNames end up in KV keys, container names and file paths if let
// through; agent.New refuses each as a group and as a node name.
var badNames = []struct{ name, in string }{
	{"parent", "../x"},
	{"slash", "a/b"},
	{"empty", ""},
	{"300 chars", strings.Repeat("n", 300)},
	{"cyrillic e", "w\u0435b"},
	{"cyrillic a", "\u0430pi"},
	{"trailing dot", "web."},
}

func TestNewRefusesBadNames(t *testing.T) {
	// No request is made: New only checks its config.
	c, err := api.NewClient(&api.Config{Address: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	st := coordinator.NewStore(c, "")
	for _, tc := range badNames {
		for _, field := range []string{"group", "node"} {
			t.Run(field+"/"+tc.name, func(t *testing.T) {
				cfg := agent.Config{Group: "web", Node: "n1", Store: st, Runtime: &recordingRuntime{}}
				if field == "group" {
					cfg.Group = tc.in
				} else {
					cfg.Node = tc.in
				}
				a, err := agent.New(cfg)
				if err == nil || a != nil {
					t.Fatalf("New accepted %s %q", field, tc.in)
				}
				if !strings.Contains(err.Error(), "invalid name") || len(err.Error()) > 300 {
					t.Fatalf("error does not name the cause briefly: %v", err)
				}
			})
		}
	}
}
