package coordinator

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"
)

// ruleKeys are the keys r names for sha: those it closes by and those it
// reads.
func ruleKeys(r Rule, k Keys, sha string) []string {
	var out []string
	if kr, ok := r.(KeyRule); ok {
		out = append(out, kr.Keys(k, sha)...)
	}
	if rr, ok := r.(ReadingRule); ok {
		out = append(out, rr.ReadsKeys(k, sha)...)
	}
	return out
}

// Every key a rule names is in the look, and the look reads nothing else
// but the few keys every verdict needs: no key is listed by hand.
func TestLookKeysComeFromTheRules(t *testing.T) {
	k, _ := NewKeys("", "web")
	sha := strings.Repeat("a", 64)
	exact, trees := lookKeys(k, sha, "n1")
	core := []string{k.History(sha), k.Node("n1"), k.Membership()}
	look := append(slices.Clone(exact), trees...)
	for _, r := range Rules {
		t.Run(fmt.Sprintf("%T", r), func(t *testing.T) {
			for _, key := range ruleKeys(r, k, sha) {
				in := exact
				if strings.HasSuffix(key, "/") {
					in = trees
				}
				if !strings.HasPrefix(key, k.Root()) || !slices.Contains(in, key) {
					t.Errorf("%s names %q, which the look does not read (exact %q, trees %q)", r.State(), key, exact, trees)
				}
			}
		})
	}
	var named []string
	for _, r := range Rules {
		named = append(named, ruleKeys(r, k, sha)...)
	}
	for i, key := range look {
		if !slices.Contains(core, key) && !slices.Contains(named, key) {
			t.Errorf("the look reads %q, which no rule names", key)
		}
		if slices.Contains(look[:i], key) {
			t.Errorf("the look reads %q twice", key)
		}
	}
	for _, key := range core {
		if !slices.Contains(exact, key) {
			t.Errorf("the look does not read %q", key)
		}
	}
}

// ReadFor reads every key a rule names, from Consul: each written, each
// is in what the look parsed (a folder's through a key under it).
func TestReadForReadsEveryRuleKey(t *testing.T) {
	ctx := testCtx(t)
	c, st := devStore(t)
	k, _ := st.Keys("web")
	r, err := st.Commit(ctx, "web", specWith(t, "pause", 2, 1), "me", "v1")
	if err != nil {
		t.Fatal(err)
	}
	written := map[Rule][]string{}
	for _, rule := range Rules {
		for _, key := range ruleKeys(rule, k, r.SHA) {
			if strings.HasSuffix(key, "/") {
				key += "n1"
			}
			if _, err := c.KV().Put(&api.KVPair{Key: key, Value: []byte("{}")}, nil); err != nil {
				t.Fatal(err)
			}
			written[rule] = append(written[rule], key)
		}
	}
	g, err := st.ReadFor(ctx, "web", "n1")
	if err != nil {
		t.Fatal(err)
	}
	for _, rule := range Rules {
		t.Run(fmt.Sprintf("%T", rule), func(t *testing.T) {
			for _, key := range written[rule] {
				if g.byKey[key] == nil {
					t.Errorf("%s names %q, which ReadFor did not read", rule.State(), key)
				}
			}
		})
	}
}
