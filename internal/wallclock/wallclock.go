// Package wallclock is the wall clock that rollagent writes into Consul KV
// (records' since, failures' and events' times, claims) and compares with
// times read from there: one place to read it, so that a test build can
// set this host's clock apart from the others' (skew_testclock.go) and
// the nemesis can run hosts whose clocks disagree, which containers on one
// kernel cannot. Durations measured on one host (a lease watched, a step's
// bound) use time.Now's monotonic reading and do not come here.
package wallclock

import "time"

// skew is added to every reading. Only a build with the rollagent_testclock
// tag sets it; a production build has no way to.
var skew time.Duration

// Now is time.Now on this host's wall clock, with its skew in a test
// build. The skew shifts its monotonic reading too: a duration between two
// readings of Now is exact whatever the skew, one against a reading of
// time.Now (time.Since) is off by it.
func Now() time.Time { return time.Now().Add(skew) }

// Skew is the skew a test build was given (0 in production).
func Skew() time.Duration { return skew }
