package ui

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/rollagent/rollagent/coordinator"
)

// TestConsulUIShowsRollout stops a rollout of three nodes half-way (v1
// converged, v2 committed, one node holding the slot with its workload
// down, two waiting) and checks that the Consul UI shows it: the Services
// page lists one instance of rollagent-<group> per node with its current
// and desired SHA and its state, the holder's check failing; the Key/Value
// page shows the group's tree, and a node's record as readable JSON.
func TestConsulUIShowsRollout(t *testing.T) {
	bin := chromiumPath(t)
	const group = "web"
	f := newFleet(t, group, "n1", "n2", "n3")

	v1 := f.commit("1.0")
	eventually(t, 2*time.Minute, "v1 converged on every node", func() string {
		if f.converged(v1) {
			return ""
		}
		return fmt.Sprintf("node states %+v", f.nodeStates())
	})
	f.holdReplacements()
	v2 := f.commit("1.1")
	holder := ""
	eventually(t, 2*time.Minute, "one node replacing, the others waiting", func() string {
		if holder = f.midRollout(v1, v2); holder != "" {
			return ""
		}
		return fmt.Sprintf("node states %+v", f.nodeStates())
	})
	// keepHealth sees the holder's workload down within a third of the TTL.
	eventually(t, time.Minute, "the service to mirror KV, the holder's check critical",
		func() string { return f.serviceProblem(holder) })
	t.Logf("mid-rollout: %s replacing %s -> %s", holder, coordinator.ShortSHA(v1), coordinator.ShortSHA(v2))

	b := newBrowser(t, bin)
	base := "http://" + f.srv.HTTPAddr + "/ui/dc1/"
	b.open(base + "services/rollagent-" + group + "/instances")
	b.waitPage(90*time.Second, "each instance's SHA, state and health, as KV has them",
		func(text string) string { return instancesProblem(text, f, v1, v2) })
	b.screenshot("ui-services.png")

	b.open(base + "kv/" + f.keys().Root())
	b.waitPage(90*time.Second, "the group's tree", func(text string) string {
		return lacks(text, "desired", "history", "nodes", "slot")
	})
	b.screenshot("ui-kv.png")

	// The holder as KV has it now: on a loaded machine a session can lapse
	// and the slot pass on, which is the system working, not the UI failing.
	if holder = f.midRollout(v1, v2); holder == "" {
		t.Fatalf("the rollout is no longer frozen half-way: node states %+v", f.nodeStates())
	}
	b.open(base + "kv/" + f.keys().Node(holder) + "/edit")
	b.waitPage(90*time.Second, "the holder's record as JSON", func(text string) string {
		return lacks(text, `"node"`, `"`+holder+`"`, `"state"`, `"replacing"`, `"sha"`, `"`+v1+`"`, `"desired"`, `"`+v2+`"`)
	})
}

// instancesProblem checks the Services page's text instance by instance
// against KV, read at each look: each shows the SHA it runs, the SHA it
// heads for and its state as tags, and its workload check failing while it
// replaces (beside its session's check, passing) and passing otherwise. The
// rollout must still be frozen half-way (one node replacing v1 -> v2), which
// is what the screenshot is for.
func instancesProblem(text string, f *fleet, v1, v2 string) string {
	holder := f.midRollout(v1, v2)
	if holder == "" {
		return fmt.Sprintf("KV shows no rollout frozen half-way: node states %+v", f.nodeStates())
	}
	blocks, problem := instanceBlocks(text, f)
	if problem != "" {
		return problem
	}
	for _, n := range f.nodes {
		want := []string{"sha:" + coordinator.ShortSHA(v1), "desired:" + coordinator.ShortSHA(v2)}
		if n == holder {
			// Its workload check fails; its session's check passes.
			want = append(want, "state:"+string(coordinator.StateReplacing), "1/2 service checks failing")
		} else {
			want = append(want, "state:"+string(coordinator.StateWaiting), "All service checks passing")
		}
		if p := lacks(blocks[n], want...); p != "" {
			return fmt.Sprintf("instance of %s (holder %s): %s", n, holder, p)
		}
	}
	return ""
}

// instanceBlocks cuts the page's text into one piece per instance, from
// its service ID to the next instance's.
func instanceBlocks(text string, f *fleet) (map[string]string, string) {
	type at struct {
		node string
		i    int
	}
	var starts []at
	for _, n := range f.nodes {
		id := "rollagent-" + f.group + "-" + n
		i := strings.Index(text, id)
		if i < 0 {
			return nil, "no instance " + id
		}
		starts = append(starts, at{n, i})
	}
	sort.Slice(starts, func(a, b int) bool { return starts[a].i < starts[b].i })
	blocks := map[string]string{}
	for k, s := range starts {
		end := len(text)
		if k+1 < len(starts) {
			end = starts[k+1].i
		}
		blocks[s.node] = text[s.i:end]
	}
	return blocks, ""
}
