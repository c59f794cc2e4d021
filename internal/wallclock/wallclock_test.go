package wallclock

import (
	"testing"
	"time"
)

// A skewed reading is off on the wall clock by the skew, and a duration
// between two readings stays exact.
func TestNowKeepsTheMonotonicReading(t *testing.T) {
	defer func(s time.Duration) { skew = s }(skew)
	skew = -10 * time.Minute
	a := Now()
	if d := Now().Sub(a); d < 0 || d > time.Minute {
		t.Fatalf("between two skewed readings: %s, want the time between them", d)
	}
	if off := time.Now().Round(0).Sub(a.Round(0)); off < 10*time.Minute-time.Minute || off > 10*time.Minute+time.Minute {
		t.Fatalf("wall clock off by %s, want about 10m", off)
	}
}
