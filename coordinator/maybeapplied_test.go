package coordinator

import (
	"errors"
	"fmt"
	"testing"

	"github.com/hashicorp/consul/api"
)

// A cancel that failed says "may be recorded" whenever the request could
// have reached Consul: a 500 may come after the write was applied.
func TestMaybeApplied(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"refused connection", &UnreachableError{Addr: "http://x", Err: errors.New("connection refused")}, false},
		{"answer lost", &UnreachableError{Addr: "http://x", Err: errors.New("EOF"), Sent: true}, true},
		{"500 from a client agent", fmt.Errorf("consul: %w", api.StatusError{Code: 500, Body: "rpc error making call: EOF"}), true},
		{"no leader", fmt.Errorf("consul: %w", api.StatusError{Code: 500, Body: "No cluster leader"}), true},
		{"rate limited", fmt.Errorf("consul: %w", api.StatusError{Code: 429}), false},
		{"denied", ErrACLDenied, false},
		{"conflict", ErrConflict, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := maybeApplied(tt.err); got != tt.want {
				t.Fatalf("maybeApplied(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}
