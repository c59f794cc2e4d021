package lockstep

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/internal/consultest"
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

// A note that would make the claim's own slot key too large for a bounded
// read is refused before anything is written: every reader would count
// that honest claim as a key it cannot read.
func TestLongNoteRefused(t *testing.T) {
	srv := consultest.NewDev(t)
	c := srv.Client()
	g := commit(t, c, "long-note", 1)
	m := newSem(t, c, "n1")
	long := strings.Repeat("n", MaxNote+1)
	ctx := ctxFor(t, time.Minute)
	if _, err := m.AcquireWith(ctx, g, Writes{Note: long}); !errors.Is(err, ErrNoteTooLong) {
		t.Fatalf("AcquireWith a %d-byte note: %v, want ErrNoteTooLong", len(long), err)
	}
	if _, err := m.Reclaim(ctx, g, long); !errors.Is(err, ErrNoteTooLong) {
		t.Fatalf("Reclaim: %v, want ErrNoteTooLong", err)
	}
	if err := m.ClaimDown(ctx, g, long); !errors.Is(err, ErrNoteTooLong) {
		t.Fatalf("ClaimDown: %v, want ErrNoteTooLong", err)
	}
	if pairs, _, err := c.KV().List(testPrefix, nil); err != nil || len(pairs) != 0 {
		t.Fatalf("keys under the slot after refused notes: %d, %v; want none", len(pairs), err)
	}
	h, err := m.AcquireWith(ctx, g, Writes{Note: strings.Repeat("n", MaxNote)})
	if err != nil {
		t.Fatalf("AcquireWith a note of MaxNote bytes: %v", err)
	}
	_ = h.Release(ctx)
}
