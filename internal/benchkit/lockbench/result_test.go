package lockbench

import (
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/internal/consultest"
)

func TestMaxOverlap(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	hold := func(from, to int) Hold { return Hold{Start: at(from), End: at(to)} }
	tests := []struct {
		name  string
		holds []Hold
		want  int
	}{
		{"none", nil, 0},
		{"one after another", []Hold{hold(0, 10), hold(20, 30)}, 1},
		{"one ends as the next starts", []Hold{hold(0, 10), hold(10, 20)}, 1},
		{"two at once", []Hold{hold(0, 10), hold(5, 15)}, 2},
		{"three, two of them nested", []Hold{hold(0, 30), hold(5, 10), hold(8, 20), hold(25, 40)}, 3},
		{"same start", []Hold{hold(0, 10), hold(0, 10)}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := maxOverlap(tt.holds); got != tt.want {
				t.Fatalf("maxOverlap = %d, want %d", got, tt.want)
			}
		})
	}
}

// countedClient's requests are counted by class: KV and transactions,
// liveness, and the rest.
func TestCountedClientCountsByClass(t *testing.T) {
	srv := consultest.NewDev(t)
	c, ctr, closeIdle := countedClient(t, srv.HTTPAddr)
	defer closeIdle()
	if _, err := c.KV().Put(&api.KVPair{Key: "lockbench/x"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.KV().Get("lockbench/x", nil); err != nil {
		t.Fatal(err)
	}
	id, _, err := c.Session().Create(&api.SessionEntry{TTL: "10s"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Session().Renew(id, nil); err != nil {
		t.Fatal(err)
	}
	if got, want := counts(ctr), (reqCounts{reqCoord: 2, reqLive: 1, reqSetup: 1}); got != want {
		t.Fatalf("counts %v, want %v", got, want)
	}
}
