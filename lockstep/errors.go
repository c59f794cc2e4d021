package lockstep

import (
	"errors"
	"fmt"
)

var (
	// ErrSuperseded means the desired key moved on: the gate was for a SHA
	// that is no longer desired.
	ErrSuperseded = errors.New("lockstep: desired changed")
	// ErrCancelled means a key that closes the gate exists (a CANCEL or a
	// pause). The error returned wraps it in a *ClosedError naming the key.
	ErrCancelled = errors.New("lockstep: gate closed")
	// ErrSessionLost means the Consul session behind a contender or a hold
	// is gone, so it holds nothing and must not act.
	ErrSessionLost = errors.New("lockstep: session lost")
	// ErrNotHeld is returned by Fence and Release on a hold already released.
	ErrNotHeld = errors.New("lockstep: not held")
	// ErrGateStale means a check of Gate.GrantChecks failed at the grant:
	// what the gate's Limit was computed from changed, so the caller must
	// compute it again before it waits again.
	ErrGateStale = errors.New("lockstep: the gate's limit is stale")
	// ErrBadGate means a Gate is missing a field it needs.
	ErrBadGate = errors.New("lockstep: bad gate")
	// ErrBadName means Options.Name cannot name a folder of keys.
	ErrBadName = errors.New("lockstep: bad name")
	// ErrNoClaim is returned by Reclaim when no claim names the contender.
	ErrNoClaim = errors.New("lockstep: no claim to reclaim")
	// ErrClaimLost is what a *LostError is: another contender's claim ran
	// out of lease with its session gone, and must be reported (MarkLost).
	ErrClaimLost = errors.New("lockstep: a claim was lost")
	// ErrNoSlotNumber means every slot number a reader counts is taken, by
	// keys under the shared .slots/ folder that no grant made (a token
	// that may write there wrote them): nothing is granted until they go.
	ErrNoSlotNumber = errors.New("lockstep: every slot number is taken")
	// ErrUnreadable means the semaphore could not be read within the
	// bounds a contender accepts (doc.go, "Bounded reads"): the holders
	// record, or the names of the keys under the prefix, are over them.
	// Nothing is granted until they are not; the read is retried, as one
	// that failed to reach Consul is.
	ErrUnreadable = errors.New("lockstep: the semaphore's keys are over the size a contender reads")
	// ErrNoteTooLong means Writes.Note is over MaxNote: the claim's slot
	// key it goes into would be over the size a bounded read takes, and
	// every reader would count it on the safe side as a key it cannot read.
	ErrNoteTooLong = errors.New("lockstep: note too long")
)

// ClosedError says which closing key shut the gate.
type ClosedError struct{ Key string }

func (e *ClosedError) Error() string        { return fmt.Sprintf("lockstep: gate closed: %s exists", e.Key) }
func (e *ClosedError) Is(target error) bool { return target == ErrCancelled }

// TxnError reports a transaction that Consul rejected for a reason other
// than the gate, the session or a CAS race, for example a caller's own op in
// Fence, or a permission denied.
type TxnError struct {
	Op   int
	What string
}

func (e *TxnError) Error() string { return fmt.Sprintf("lockstep: txn op %d failed: %s", e.Op, e.What) }
