package agent

import (
	"errors"
	"fmt"
	"testing"

	"github.com/rollagent/rollagent/coordinator"
)

// A failure that cannot be recorded because the group cannot be read whole
// now is kept, and its node keeps its slot, rather than dropped: a dropped
// failure never counts toward max_failures.
func TestRecordLater(t *testing.T) {
	for _, tt := range []struct {
		name string
		err  error
		want bool
	}{
		{"an outage", &coordinator.UnreachableError{Addr: "x", Err: errors.New("refused")}, true},
		{"a conflict", coordinator.ErrConflict, true},
		{"a group too large to read whole", fmt.Errorf("read: %w", coordinator.ErrGateUnread), true},
		{"permission denied", coordinator.ErrACLDenied, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := recordLater(tt.err); got != tt.want {
				t.Fatalf("recordLater(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}
