package testkit

import (
	"context"
	"testing"
	"time"
)

// Context is a context for a test's calls that ends after d, so that a
// call to a server that hangs fails the test rather than hanging it, and
// at the latest when the test and its cleanups are done.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
