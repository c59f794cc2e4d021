package testkit

import (
	"testing"
	"time"
)

// Every is how often Eventually and Steady look.
const Every = 200 * time.Millisecond

// Eventually polls cond every Every for at most d and fails the test if it
// never held: a bounded wait, never a bare sleep.
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	EventuallyEvery(t, d, Every, what, cond)
}

// EventuallyEvery is Eventually polling every interval, for a wait on
// something cheap to look at that a test wants to catch quickly.
func EventuallyEvery(t testing.TB, d, interval time.Duration, what string, cond func() bool) {
	t.Helper()
	if !PollEvery(d, interval, cond) {
		t.Fatalf("timed out after %s waiting for %s", d, what)
	}
}

// Poll is Eventually that reports a timeout instead of failing the test,
// for a check that must go on to clean up, or a goroutine other than the
// test's, which must not call t.Fatal.
func Poll(d time.Duration, cond func() bool) bool { return PollEvery(d, Every, cond) }

// PollEvery is Poll looking every interval.
func PollEvery(d, interval time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(interval)
	}
	return false
}

// Steady watches for d, every interval, that nothing changes: check says
// what did, and the first thing it says fails the test. A bounded watch
// for movement that must not come, not a synchronisation.
func Steady(t testing.TB, d, interval time.Duration, check func() error) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(interval) {
		if err := check(); err != nil {
			t.Fatal(err)
		}
	}
}
