package integration

import (
	"testing"
	"time"
)

// TestNemesisScheduleOrder checks the canaries and update.after a seed's
// commits draw: over a few seeds some commits have a canary, some of
// those auto_promote, promote events are drawn, and only the second group
// names another group in after, the first: no cycle.
func TestNemesisScheduleOrder(t *testing.T) {
	groups, nodes := []string{"g1", "g2", "g3"}, []string{"a", "b", "c", "d"}
	var canary, auto, after, promote int
	for _, seed := range []uint64{1, 2, 3, 42, 1e6} {
		for _, e := range schedule(seed, 10*time.Minute, groups, nodes) {
			if e.kind == opPromote {
				promote++
			}
			if e.canary > 0 {
				canary++
			}
			if e.auto {
				auto++
				if e.canary == 0 {
					t.Errorf("%s: auto_promote without a canary", e)
				}
			}
			if e.after != "" {
				after++
				if e.group != "g2" || e.after != "g1" {
					t.Errorf("%s: only g2 names a group in after, g1", e)
				}
			}
		}
	}
	for what, count := range map[string]int{"canary commits": canary, "auto_promote commits": auto, "after commits": after, "promote events": promote} {
		if count == 0 {
			t.Errorf("five seeds of 10 minutes drew no %s", what)
		}
	}
}

func TestJudgeCanaryGrant(t *testing.T) {
	base := func() canaryFacts {
		return canaryFacts{canaries: []string{"a"}, seen: true, reset: 100, promotions: []uint64{120},
			converged: map[string][]uint64{"a": {110}}}
	}
	for _, tc := range []struct {
		name  string
		node  string
		index uint64
		edit  func(*canaryFacts)
		want  canaryVerdict
	}{
		{"the canary itself", "a", 105, func(*canaryFacts) {}, canaryNotJudged},
		{"after the promotion", "b", 121, func(*canaryFacts) {}, canaryPromoted},
		{"before the promotion", "b", 119, func(*canaryFacts) {}, canaryViolation},
		{"a promotion of an earlier rollout", "b", 121, func(f *canaryFacts) { f.promotions = []uint64{90} }, canaryViolation},
		{"a rollback promotes in its own transaction", "b", 101, func(f *canaryFacts) { f.promotions = []uint64{100} }, canaryPromoted},
		{"no promotion", "b", 200, func(f *canaryFacts) { f.promotions = nil }, canaryViolation},
		{"auto, after the canary converged", "b", 111, func(f *canaryFacts) { f.promotions, f.auto = nil, true }, canaryAuto},
		{"auto, before the canary converged", "b", 109, func(f *canaryFacts) { f.promotions, f.auto = nil, true }, canaryViolation},
		{"auto, converged in an earlier rollout", "b", 111, func(f *canaryFacts) {
			f.promotions, f.auto, f.converged = nil, true, map[string][]uint64{"a": {95}}
		}, canaryViolation},
		{"auto, one of two canaries converged", "c", 111, func(f *canaryFacts) {
			f.promotions, f.auto, f.canaries = nil, true, []string{"a", "b"}
		}, canaryViolation},
		{"no canary stage (empty record)", "b", 105, func(f *canaryFacts) { f.canaries = nil }, canaryNotJudged},
		{"record not seen", "b", 105, func(f *canaryFacts) { f.seen = false }, canaryNotJudged},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := base()
			tc.edit(&f)
			if got, why := judgeCanaryGrant(tc.node, tc.index, f); got != tc.want {
				t.Errorf("verdict %d (%s), want %d", got, why, tc.want)
			}
		})
	}
}

func TestJudgeAfterGrant(t *testing.T) {
	conv := func(i uint64, sha string) recVer { return recVer{index: i, sha: sha, converged: true} }
	moving := func(i uint64, sha string) recVer { return recVer{index: i, sha: sha} }
	// The named group: converged on s1 by index 30, s2 committed at 40,
	// converged on it by 60.
	base := func() afterFacts {
		return afterFacts{from: 10, nodes: []string{"m1", "m2"}, desired: []shaVer{{5, "s1"}, {40, "s2"}},
			records: map[string][]recVer{
				"m1": {moving(6, "s1"), conv(20, "s1"), moving(45, "s2"), conv(50, "s2")},
				"m2": {moving(7, "s1"), conv(30, "s1"), moving(47, "s2"), conv(60, "s2")},
			}}
	}
	for _, tc := range []struct {
		name         string
		index        uint64
		edit         func(*afterFacts)
		some, atThen bool
	}{
		{"before the named group converged", 25, func(*afterFacts) {}, false, false},
		{"once it converged", 31, func(*afterFacts) {}, true, true},
		{"it moved away before the grant: raced", 42, func(*afterFacts) {}, true, false},
		{"converged only before the commit", 42, func(f *afterFacts) { f.from = 41 }, false, false},
		{"converged on the new SHA", 61, func(f *afterFacts) { f.from = 41 }, true, true},
		{"one node on its old SHA", 61, func(f *afterFacts) {
			f.from, f.records["m2"] = 41, f.records["m2"][:2]
		}, false, false},
		{"a node never seen", 61, func(f *afterFacts) { f.nodes = append(f.nodes, "m3") }, false, false},
		{"nothing committed", 31, func(f *afterFacts) { f.desired = nil }, false, false},
		{"converged at the commit itself", 35, func(f *afterFacts) { f.from = 32 }, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := base()
			tc.edit(&f)
			if some, at := judgeAfterGrant(tc.index, f); some != tc.some || at != tc.atThen {
				t.Errorf("converged some time %v, at the grant %v; want %v, %v", some, at, tc.some, tc.atThen)
			}
		})
	}
}
