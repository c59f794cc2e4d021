package agent

import (
	"testing"
	"time"
)

func TestCheckSessionTTL(t *testing.T) {
	for _, tc := range []struct {
		ttl time.Duration
		ok  bool
	}{
		{-5 * time.Second, false},
		{0, false},
		{time.Second, false},
		{MinSessionTTL - time.Millisecond, false},
		{MinSessionTTL, true},
		{10 * time.Second, true},
		{MaxSessionTTL, true},
		{MaxSessionTTL + time.Millisecond, false},
		{100 * time.Hour, false},
	} {
		t.Run(tc.ttl.String(), func(t *testing.T) {
			if err := CheckSessionTTL(tc.ttl); (err == nil) != tc.ok {
				t.Fatalf("CheckSessionTTL(%s) = %v, want ok %v", tc.ttl, err, tc.ok)
			}
		})
	}
}
