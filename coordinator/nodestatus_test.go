package coordinator

import (
	"encoding/json"
	"strings"
	"testing"
)

// Every published state decodes and is accepted; anything else, a case
// change included, is someone else's record and is refused with the error
// status shows.
func TestNodeStatusDecode(t *testing.T) {
	tests := []struct {
		state NodeStatus
		valid bool
	}{
		{StateConverged, true}, {StateWaiting, true}, {StateReplacing, true}, {StateVerifying, true},
		{StateFailed, true}, {StateCancelled, true}, {StatePaused, true}, {StateUnknown, true},
		{"", false}, {"done", false}, {"Converged", false}, {"converged ", false},
	}
	for _, tc := range tests {
		t.Run(string(tc.state), func(t *testing.T) {
			if tc.state.Valid() != tc.valid {
				t.Fatalf("Valid() = %v, want %v", !tc.valid, tc.valid)
			}
			b, err := json.Marshal(NodeState{Node: "n1", State: tc.state})
			if err != nil {
				t.Fatal(err)
			}
			// The KV layout keeps the plain string.
			if want := `"state":"` + string(tc.state) + `"`; !strings.Contains(string(b), want) {
				t.Fatalf("encoded %s, want it to hold %s", b, want)
			}
			var n NodeState
			err = decode("nodes/n1", b, &n)
			switch {
			case tc.valid && (err != nil || n.State != tc.state):
				t.Fatalf("decode = %+v, %v; want state %q", n, err, tc.state)
			case !tc.valid && (err == nil || err.Error() != `nodes/n1: state "`+string(tc.state)+`" is not one of the known states`):
				t.Fatalf("decode error %v, want the unknown state named", err)
			}
		})
	}
}
