package lockstep

import (
	"fmt"
	"time"

	"github.com/hashicorp/consul/api"
)

// DefaultLimit is K when a Gate does not say.
const DefaultLimit = 1

// Gate is the data a slot is granted against. It is plain data, not a
// callback, so that any process can evaluate it and Consul checks it inside
// the same transaction that grants or uses the slot.
type Gate struct {
	// DesiredKey is the KV key holding the desired SHA. Required.
	DesiredKey string
	// DesiredIndex is the ModifyIndex of DesiredKey the caller decided on.
	// Required: a slot is only granted while the key is still at it.
	DesiredIndex uint64
	// Closed lists keys whose existence closes the gate, such as the CANCEL
	// for this SHA. A writer that creates one must rewrite DesiredKey in the
	// same transaction (see CloseOps): waiters watch only DesiredKey,
	// because a blocking query on an absent key wakes on every write near it.
	Closed []string
	// Brakes lists keys whose existence closes the gate too, but that the
	// caller's token may not write: Consul takes a check that a key does
	// not exist for a write of it, so they are not checked in the
	// transaction. Their writers must rewrite DesiredKey in the same
	// transaction (CloseOps), whose index the transaction checks. A gate
	// found closed names the first that exists, as it does one of Closed.
	Brakes []string
	// Limit is K, how many may hold a slot at once.
	// Optional, defaults to DefaultLimit.
	Limit int
	// GrantChecks are checks (check-index, check-not-exists) that what
	// Limit was computed from still holds, such as the size of a group that
	// a percentage is of: they go into the transaction that grants a slot
	// alone, not into fences, as a hold's K is not taken back. One that
	// fails ends the wait with ErrGateStale. Optional.
	GrantChecks api.TxnOps
	// Lease is how long a waiter must itself have watched a node's claim
	// orphaned (its session gone, the claim unchanged) before it reports
	// it lost; until then, or until the node releases, the claim counts
	// against K: a process that dies mid-step leaves its node down until
	// it returns, or until the step could not have lasted longer anyway.
	// Make it the longest one hold can run. Optional, defaults to 0: the
	// grant writes no claim, and the slot ends with its session.
	Lease time.Duration
	// Stagger is how long a grant waits after a slot was freed (a release,
	// or a claim marked lost): the head of the line takes a free slot only
	// once Stagger has passed, on its own monotonic clock, since it first
	// saw the latest release (Options.Releases). A host's wall clock is
	// never compared with a time another host wrote. Optional, defaults to
	// 0: no wait.
	Stagger time.Duration
	// PerDomain bounds, besides Limit, how many names of one domain
	// (Options.Domain: a rack, a zone) may use a slot or be down at once,
	// counted as Limit is: live holders, claims that count, and the names
	// Options.Unavailable lists. The head of the line judges it from the
	// holders record it grants on by CAS, in which every holder's and
	// claim's domain is written, so a dead holder's claim counts in its
	// domain. The line stays FIFO: a head whose domain is full waits, and
	// everyone behind it. Optional, defaults to 0: no bound per domain.
	PerDomain int
}

func (g Gate) limit() int {
	if g.Limit < 1 {
		return DefaultLimit
	}
	return g.Limit
}

func (g Gate) validate() error {
	if g.DesiredKey == "" || g.DesiredIndex == 0 {
		return fmt.Errorf("%w: DesiredKey and DesiredIndex are required", ErrBadGate)
	}
	return nil
}

// checkOps are the transaction ops that assert the gate is open.
func (g Gate) checkOps() api.TxnOps {
	ops := api.TxnOps{{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: g.DesiredKey, Index: g.DesiredIndex}}}
	for _, k := range g.Closed {
		ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCheckNotExists, Key: k}})
	}
	return ops
}

// gateError maps a failed op among checkOps to its typed error.
func (g Gate) gateError(op int) error {
	if op == 0 {
		return ErrSuperseded
	}
	if op-1 < len(g.Closed) {
		return &ClosedError{Key: g.Closed[op-1]}
	}
	return nil
}

// CloseOps returns the ops that close a gate by creating key, and that touch
// desired at its index so that every waiter wakes. The touch keeps the value
// and bumps the key's Flags, a generation counter: Consul skips a write that
// changes nothing, and a skipped write would wake no one. It is a CAS, so if
// desired moved meanwhile, nothing is written.
func CloseOps(desired *api.KVPair, key string, value []byte) api.TxnOps {
	return append(TouchOps(desired), &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: key, Value: value}})
}

// TouchOps rewrite desired with the same value and the next Flags, which
// moves its ModifyIndex: open gates for it close and waiters wake. Use it
// with any change to a gate's closing keys, such as lifting a pause.
func TouchOps(desired *api.KVPair) api.TxnOps {
	return api.TxnOps{{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: desired.Key, Value: desired.Value,
		Flags: desired.Flags + 1, Index: desired.ModifyIndex}}}
}
