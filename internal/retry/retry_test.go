package retry

import (
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	tests := []struct {
		name        string
		b           *Backoff
		first, most time.Duration
		jittered    bool
	}{
		{"jittered", New(250*time.Millisecond, 10*time.Second), 250 * time.Millisecond, 10 * time.Second, true},
		{"steady", NewSteady(time.Second, 10*time.Second), time.Second, 10 * time.Second, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for round := 0; round < 2; round++ {
				if tt.b.Retrying() {
					t.Fatal("retrying before any failure")
				}
				for n := 0; n < 10; n++ {
					bound := min(tt.first<<n, tt.most)
					lo := bound
					if tt.jittered {
						lo = bound / 2
					}
					if d := tt.b.Next(); d < lo || d > bound+1 {
						t.Fatalf("pause %d is %v, want within [%v, %v]", n, d, lo, bound)
					}
					if !tt.b.Retrying() {
						t.Fatal("not retrying after a failure")
					}
				}
				tt.b.Reset()
			}
		})
	}
}

func TestJitter(t *testing.T) {
	for range 100 {
		if d := Jitter(time.Second); d < time.Second/2 || d > time.Second {
			t.Fatalf("Jitter(1s) = %v", d)
		}
	}
}
