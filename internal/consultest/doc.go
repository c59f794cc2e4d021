// Package consultest starts real Consul agents for tests: a single -dev agent,
// a single persistent server that can be restarted with its data, an
// N-server cluster, or client agents joined to a server (one per node), all
// on free loopback ports.
//
// The binary is found in this order: $ROLLAGENT_CONSUL, a consul of 1.13 or
// newer on PATH, then the one `make consul` builds into the user cache dir.
// When none is found the test is skipped with the reason, except under CI=true,
// where it fails: CI must never pass because Consul was missing.
package consultest
