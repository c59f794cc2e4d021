package agent

import "time"

// WithoutStateMirror returns c with the node's state kept out of its Consul
// service: for the fleet bench's diagnostic rows, which show what mirroring
// it costs a Consul agent that carries every node's service.
func WithoutStateMirror(c Config) Config {
	c.noStateMirror = true
	return c
}

// WithSettleTimeout returns c with d as the bound of a release or a
// failure's record (settleTimeout, a minute), for a test whose Consul
// outage must outlast it without taking minutes.
func WithSettleTimeout(c Config, d time.Duration) Config {
	c.settleTimeout = d
	return c
}

// WithLeaseGrace returns c with d as what a node's lease gets beyond the
// bounds of what one hold runs (leaseGrace, 30 s), for a test that waits
// for a lease to run out.
func WithLeaseGrace(c Config, d time.Duration) Config {
	c.leaseGrace = d
	return c
}

// WithBeforeLostMark returns c with f called as the agent builds the
// transaction that marks another node lost and records its failure, after
// the read it decides on, at each try: a test's reclaim by that node
// comes between the judgement and the write.
func WithBeforeLostMark(c Config, f func()) Config {
	c.beforeLostMark = f
	return c
}

// ErrSetAside lets a test's runtime fail a step before it started anything
// of the release, as Docker's does when it cannot set the old container
// aside.
var ErrSetAside = errSetAside
