package lockstep

import (
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"
)

// What a bounded read of the slot counts on the safe side, and so may
// stall a group, shows in the view status builds from one listing.
func TestParseHoldersNamesWhatABoundedReadCannotTake(t *testing.T) {
	big := make([]byte, keyLimit+1)
	longName := strings.Repeat("x", folderNamesLimit/4)
	cases := []struct {
		name  string
		pairs api.KVPairs
		want  []string // in the problem, each
	}{
		{"nothing odd", api.KVPairs{{Key: HolderKey(testPrefix, "n1", "s1"), Value: []byte("{}")}}, nil},
		{"too many holder keys", manyHolderKeys("n99", maxKeysPerName+1), []string{`"n99"`, "counts each such name as holding"}},
		{"holder key names too long", api.KVPairs{
			{Key: HolderKey(testPrefix, "n98", "a"+longName)}, {Key: HolderKey(testPrefix, "n98", "b"+longName)},
			{Key: HolderKey(testPrefix, "n98", "c"+longName)}, {Key: HolderKey(testPrefix, "n98", "d"+longName)},
			{Key: HolderKey(testPrefix, "n98", "e"+longName)},
		}, []string{`"n98"`, "bytes of names"}},
		{"a holder key too large", api.KVPairs{{Key: HolderKey(testPrefix, "n97", "s1"), Value: big}},
			[]string{HolderKey(testPrefix, "n97", "s1"), "while the session it names lives"}},
		{"a slot key too large", api.KVPairs{{Key: SlotKey(testPrefix, 3), Value: big}},
			[]string{SlotKey(testPrefix, 3), "counts each as a claim"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := ParseHolders(testPrefix, tc.pairs).Problem
			if len(tc.want) == 0 && p != "" {
				t.Fatalf("problem %q, want none", p)
			}
			for _, w := range tc.want {
				if !strings.Contains(p, w) {
					t.Errorf("problem %q, want it to say %q", p, w)
				}
			}
		})
	}
}

func manyHolderKeys(name string, n int) api.KVPairs {
	var out api.KVPairs
	for i := range n {
		out = append(out, &api.KVPair{Key: HolderKey(testPrefix, name, strings.Repeat("s", i+1)), Value: []byte("{}")})
	}
	return out
}
