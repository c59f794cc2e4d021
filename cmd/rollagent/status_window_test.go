package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rollagent/rollagent/internal/consultest"
)

// A group outside its maintenance window shows it: the gate's state, when
// the next window opens in its zone, in how long, and the same in JSON.
func TestStatusOutsideWindow(t *testing.T) {
	srv := consultest.NewDev(t)
	next := time.Now().UTC().Add(2 * time.Hour).Truncate(time.Minute)
	spec := fmt.Sprintf(`container { image = "rollagent-demo/web:v1" }
update {
  window {
    start  = %q
    length = "30m"
  }
}
`, next.Format("15:04"))
	commitWebSpec(t, srv.HTTPAddr, "web.hcl", spec)
	code, out, errs := runCLI(t, srv.HTTPAddr, "status", "web")
	want := fmt.Sprintf("CLOSED (outside_window): outside the maintenance window; the next opens %s UTC (in ", next.Format("Mon 15:04"))
	if code != 0 || !strings.Contains(out, want) {
		t.Fatalf("status: code %d, stderr %s; want %q in:\n%s", code, errs, want, out)
	}
	var doc struct {
		Gate gateDoc `json:"gate"`
	}
	readStatusJSON(t, srv.HTTPAddr, &doc)
	if doc.Gate.State != "outside_window" || doc.Gate.OpensAt == nil || !doc.Gate.OpensAt.Equal(next) {
		t.Fatalf("status -o json gate: %+v, want outside_window opening at %s", doc.Gate, next)
	}
}
