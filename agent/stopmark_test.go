package agent_test

import (
	"testing"
	"time"

	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/testkit/groupkit"
)

// An agent that stops cleanly marks its record with the time before its
// service leaves the catalog, so that status's grace before it calls the
// node lost runs from the stop, not from the node's last change, which on
// an idle node may be days old. Started again, it writes its record
// without the mark.
func TestCleanStopMarksTheRecord(t *testing.T) {
	g := groupkit.New(t, "stopmark")
	st, group := g.Store, g.Name
	sha := commitRecording(t, st, group, "v1", "")
	rt := &recordingRuntime{}
	p := startAgent(t, st, group, "n1", rt, agent.Allow{})
	var since time.Time
	g.WaitFor(30*time.Second, "n1 converged", func() bool {
		n := nodeState(t, st, group, "n1")
		if n != nil && n.SHA == sha && n.State == coordinator.StateConverged {
			since = n.Since
			return true
		}
		return false
	})
	if n := nodeState(t, st, group, "n1"); n.Stopped != nil {
		t.Fatalf("a running agent's record is marked stopped at %s", n.Stopped)
	}
	time.Sleep(1100 * time.Millisecond) // the mark must be later than since
	p.stop(t)
	n := nodeState(t, st, group, "n1")
	switch {
	case n == nil:
		t.Fatal("the stopped agent's record is gone")
	case n.Stopped == nil || !n.Stopped.After(since):
		t.Fatalf("stopped agent's record %+v, want marked stopped after its since %s", n, since)
	case n.SHA != sha || n.State != coordinator.StateConverged || !n.Since.Equal(since):
		t.Fatalf("stopped agent's record %+v changed beyond the mark (since was %s)", n, since)
	}
	if got := n.LastSign(); !got.Equal(*n.Stopped) {
		t.Fatalf("last sign %s, want the stop %s", got, n.Stopped)
	}
	// The mark's index key, written with it, finds the node without
	// reading every record (Store.Down).
	k, _ := st.Keys(group)
	indexed := func() bool {
		p, _, err := st.Get(t.Context(), k.Stopped("n1"), nil)
		if err != nil {
			t.Fatal(err)
		}
		return p != nil
	}
	if !n.StopIndex || !indexed() {
		t.Fatalf("stopped agent's record says stop_index %v, index key there %v; want both", n.StopIndex, indexed())
	}
	startAgent(t, st, group, "n1", rt, agent.Allow{})
	g.WaitFor(30*time.Second, "the restarted agent's record without the mark, and its index key gone", func() bool {
		n := nodeState(t, st, group, "n1")
		return n != nil && n.Stopped == nil && n.State == coordinator.StateConverged && !indexed()
	})
}
