package main

import (
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"
)

// The agent's policy lets it write the slot's keys that lockstep writes
// and no other key under slot/, which no reader would expect there.
func TestAgentTokenWritesOnlyTheSlotKeys(t *testing.T) {
	srv := aclConsul(t)
	c := srv.Client()
	rolloutOf(t, srv, "web")
	agentKV := storeWith(t, srv.HTTPAddr, tokenForNode(t, c, "acl-policy.hcl", "web", "n1")).Client().KV()
	slot := "rollagent/groups/web/slot/"
	for _, tc := range []struct {
		key     string
		allowed bool
	}{
		{slot + ".holders", true},
		{slot + ".tail", true},
		{slot + ".holders/some-session", true},
		{slot + "c/some-session", true},
		{slot + "junk", false},
		{slot + ".holdersjunk", false},
		{slot + ".tailjunk", false},
		{slot + "x/y", false},
	} {
		t.Run(strings.TrimPrefix(tc.key, slot), func(t *testing.T) {
			_, err := agentKV.Put(&api.KVPair{Key: tc.key, Value: []byte(`{}`)}, nil)
			denied := err != nil && strings.Contains(strings.ToLower(err.Error()), "permission denied")
			switch {
			case tc.allowed && err != nil:
				t.Fatalf("the agent's token may not write %s: %v", tc.key, err)
			case !tc.allowed && !denied:
				t.Fatalf("the agent's token wrote %s: %v", tc.key, err)
			}
			if p, _, _ := c.KV().Get(tc.key, nil); !tc.allowed && p != nil {
				t.Fatalf("%s exists", tc.key)
			}
		})
	}
}
