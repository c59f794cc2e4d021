package benchkit

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Quantile is the nearest-rank quantile of sorted durations.
func Quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*q+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// DurStats are the nearest-rank median, min and max of ds, which it leaves
// as they are.
func DurStats(ds []time.Duration) (med, lo, hi time.Duration) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	s := slices.Sorted(slices.Values(ds))
	return Quantile(s, 0.5), s[0], s[len(s)-1]
}

// Ms is d in milliseconds.
func Ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Ratio formats a/b as "N×", or "–" when either is missing.
func Ratio(a, b float64) string {
	if a <= 0 || b <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

// JoinNotes joins the notes that are not empty with "; ".
func JoinNotes(notes ...string) string {
	return strings.Join(slices.DeleteFunc(notes, func(s string) bool { return s == "" }), "; ")
}

// Poll polls cond every 10 ms for at most d, and says whether it held. It
// is what times events that have no timestamp of their own, so it polls
// finely.
func Poll(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return cond()
}
