package coordinator

import (
	"context"
	"testing"
	"time"

	"github.com/rollagent/rollagent/internal/consultest"
)

// A stopping agent marks only the record it published: not one node rm
// removed, nor one a later write (a release whose answer was lost, another
// process under the node's name) replaced.
func TestMarkStopped(t *testing.T) {
	srv := consultest.NewDev(t)
	st := NewStore(srv.Client(), "")
	ctx := context.Background()
	sha := "1111111111111111111111111111111111111111111111111111111111111111"
	published := NodeState{Node: "n1", SHA: sha, Desired: sha, State: StateVerifying, Since: time.Now().UTC()}
	newer := published
	newer.State = StateConverged
	tests := []struct {
		name   string
		stored *NodeState // nil: no record
		marked bool
	}{
		{"the record as published", &published, true},
		{"removed by node rm", nil, false},
		{"newer than what was published", &newer, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, _ := st.Keys("web")
			if _, err := srv.Client().KV().Delete(k.Node("n1"), nil); err != nil {
				t.Fatal(err)
			}
			if tt.stored != nil {
				if err := st.PutNode(ctx, "web", *tt.stored); err != nil {
					t.Fatal(err)
				}
			}
			at := time.Now()
			marked, err := st.MarkStopped(ctx, "web", published, at)
			if err != nil || marked != tt.marked {
				t.Fatalf("marked %v, %v; want %v", marked, err, tt.marked)
			}
			gs, err := st.Read(ctx, "web", nil)
			if err != nil {
				t.Fatal(err)
			}
			var got *NodeState
			for i := range gs.Nodes {
				got = &gs.Nodes[i]
			}
			switch {
			case tt.stored == nil && got != nil:
				t.Fatalf("a removed record came back: %+v", got)
			case tt.stored != nil && got == nil:
				t.Fatal("the record is gone")
			case tt.stored != nil && got.State != tt.stored.State:
				t.Fatalf("state %s, want %s as stored", got.State, tt.stored.State)
			case tt.stored != nil && (got.Stopped != nil) != tt.marked:
				t.Fatalf("stopped %v, want marked %v", got.Stopped, tt.marked)
			}
		})
	}
}
