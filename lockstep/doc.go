// Package lockstep is a gated, fenced, fair counting semaphore on Consul.
//
// A Session is a Consul session bound to the node's serfHealth and to a short
// TTL check that the Session itself keeps passing, or to a check that the
// Consul agent runs against the process (SessionOptions.ConsulRunsCheck),
// so a killed process or a dead node loses its slot within seconds instead
// of Consul's default 2×TTL plus lock-delay. Session.Done closes when the
// session is gone.
//
// Semaphore.Acquire waits in FIFO order (by the CreateIndex of each
// contender's key) and takes a slot in one transaction that also checks a
// Gate: the desired key is still at the index the caller saw, and none of the
// gate's closing keys (a CANCEL, a pause) exist. The transaction that joins
// the line also swaps the line's tail record for the joiner's key, which
// names the waiter just ahead of it: so a joiner reads O(1) bytes, not the
// line. When that waiter's key is gone by the time it looks, the holders
// record's latest grant tells whether it was granted (and released since),
// so that the joiner heads the line, or left without a grant; only then is
// the line listed. From then on it watches just the last waiter ahead of
// it (whose grant marks its key "holding"), and once it heads the line,
// just the holders (the record and their holder keys, O(K) bytes). So a
// release wakes one waiter, not all of them, and no wake reads the whole
// line.
//
// A Hold is fenced: Hold.Fence re-checks the gate and the hold in one
// transaction together with the caller's own writes, and fails once the
// session is gone, so a paused or partitioned holder cannot act after it has
// lost its slot. The grant is a fence too. AcquireWith lets the caller's
// records ride on the transaction that joins the line and on the grant,
// and Release takes records for its own transaction, which saves each a
// write of its own.
//
// A slot belongs to a name (a node), not to a session. With Gate.Lease set,
// a grant writes a Claim for the contender's Name into the holders record,
// which outlives the session: a holder killed mid-step, a dead host, a
// partition, a lost release all leave it, and it keeps counting against K
// until it is released or reported lost, whatever any clock says. The
// name's next process takes it back with Reclaim, ahead of the line and
// whatever the gate, which renews it, and releases it when its step is
// resolved. A waiter at the head of the line that has itself watched a
// claim be orphaned (its session gone) and unchanged for the claim's whole
// lease, on its own monotonic clock, gets a *LostError, reports it (a
// failure of that node's, say) and calls MarkLost: only then does the
// claim stop counting. The lease is judged on that one clock: the skew
// between hosts cannot shorten it, and a waiter that starts again starts
// its watch again, later, never sooner. ClaimDown claims a slot, whatever
// the count, for a name that is down already, so that it is served first.
//
// With Gate.Stagger set, a grant waits that long after a slot was freed.
// Each release and each MarkLost adds one to a count in the holders
// record; the head of the line measures the stagger on its own monotonic
// clock from the moment it first saw the count move (ReleaseClock), which
// for a waiter already in the blocking query is the wake-up the release
// caused. The grant's CAS on the record then proves no release came after
// the read it judged. No clock of another host is read.
//
// Gate.GrantChecks are the caller's checks that what it computed Limit
// from still holds (a group's membership, for a K that is a percentage of
// it): the grant's transaction alone checks them, never a fence, as a
// hold's K is not taken back; one that fails ends the wait with
// ErrGateStale, for the caller to compute the gate again.
//
// With Gate.PerDomain set, a name's Options.Domain (a rack, a zone) bounds
// it too: the head of the line takes a free slot only while fewer than
// PerDomain names of its domain, itself apart, hold, claim or are down
// (Options.Unavailable, placed by Options.Domains). Each grant writes the
// domain into its holder entry and claim, so the head judges it from the
// record its grant's CAS checks, and a claim counts in its domain after
// its process died. The line stays FIFO: a head whose domain is full
// waits, and the line with it. A name of domain "" shares it with no one.
//
// KV layout under the semaphore prefix P:
//
//	P/.holders            JSON {"holders": {"<session>": {...}}, "last": {...},
//	                      "claims": {"<name>": {...}}, "released": n}, CAS on every
//	                      change; last names the latest grant, claims the slots
//	                      held by name, released counts the slots freed
//	P/.holders/<name>/<session>
//	                      one holder key per holder, locked by its session: the
//	                      holders that count; a record that disagrees (a dead
//	                      holder, or not JSON at all) is rewritten at the next
//	                      grant or release
//	P/.tail               the key of the contender that joined last, swapped
//	                      in by each join (a plain set after a read, in one
//	                      transaction: Consul applies them one at a time)
//	P/c/<name>/<session>  one contender key per waiter or holder, locked by its
//	                      session; the grant marks it "holding"
//
// A contender's own keys are filed under its Name, so that an ACL policy can
// let each name write its own (key_prefix "P/c/<name>/" and
// "P/.holders/<name>/") and no other's; the holders record and the tail are
// the only keys all share. The name a holder key is filed under is the
// holder's name, whatever the record says. Keys named by session alone
// (P/c/<session>, P/.holders/<session>), as versions before wrote them, are
// still read: such a holder counts and such a waiter keeps its place, so a
// contender of this version never grants past one of an older version.
package lockstep
