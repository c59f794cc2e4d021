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
// just the holders (the record, the slot keys and the holder keys, O(K)
// bytes). So a
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
// a grant writes a Claim for the contender's Name into the slot key it
// takes (see "Slot keys" below), which outlives the session: a holder
// killed mid-step, a dead host, a partition, a lost release all leave it,
// and it keeps counting against K until it is released or reported lost,
// whatever any clock says. The name's next process takes it back with
// Reclaim, ahead of the line and whatever the gate, which renews it, and
// releases it when its step is resolved. A waiter at the head of the line
// that has itself watched a claim be orphaned (its session gone) and
// unchanged for the claim's whole lease, on its own monotonic clock, gets
// a *LostError and calls MarkLost, or MarkLostWith to write its report (a
// failure of that node's, say) in the mark's transaction, so that the
// report stands if and only if the mark does: only then does the claim
// stop counting. The lease is judged on
// that one clock: the skew between hosts cannot shorten it, and a waiter
// that starts again starts its watch again, later, never sooner. ClaimDown
// claims a slot, whatever the count, for a name that is down already, so
// that it is served first.
//
// # Slot keys: why a release touches its own slot alone
//
// Each grant takes one slot key, P/.holders/.slots/<i>, and its release
// frees that key alone: K holders never write the same key, so releases do
// not race each other or the grant. The holders record P/.holders is still
// written by every grant, but by nothing a holder does: it is the grant
// record, and only what can raise the count or renews a claim writes it (a
// grant, ClaimDown, a Reclaim), each by CAS at the index of the read it
// counted from, and a lost mark (rare), so that a grant counted before the
// mark fails and waits Gate.Stagger from it; each with a copy of the
// claims for older versions (see "Slot keys: older versions"). The line
// gives the grant to one waiter at a time (its head), so those CASes
// follow one another instead of racing.
//
// "Never more than K" holds without checking every slot key in the grant:
// the head counts from one List of P/.holders (the record, the slot keys
// and the holder keys: one snapshot), and its grant CASes the record at
// that snapshot's index of it. Whatever raised the count since writes the
// record, so the CAS fails and the head counts again; whatever changes a
// slot without the record (a release, a session's end) only lowers the
// count, so the count the head judged is at least the count
// when its transaction applies. Two grants of different slots conflict
// only when one of them counted from a stale view, which is when they
// must. The same holds for Gate.PerDomain, judged from the same snapshot,
// and for names down outside the line (Options.Unavailable,
// Gate.GrantChecks), counted as before. The gate's keys are checked in
// the grant's transaction as before, and a shrink of K waits for holders
// above it to release: nothing is revoked, as the count, not a slot's
// number, is what a grant is judged on (a slot's number is only where its
// record is kept; a claim kept by ClaimDown may take a number past K).
//
// A slot key is free when it names no one, or names a holder without a
// claim (Gate.Lease 0) whose session no longer locks its holder key. A
// grant takes the slot its name already has (its own claim, kept or lost:
// taking it over adds no node, or one that the count allows), else the
// lowest free one, else a new one, numbered below 65536 (no reader counts
// a key past it: with every number taken, by keys a token that may write
// the shared folder wrote, the grant fails with ErrNoSlotNumber); a claim
// reported lost keeps its slot, so that its node's process finds it when
// it returns. A name has one
// slot at most: only writers of the record make one.
//
// With Gate.Stagger set, a grant waits that long after a slot was freed.
// Each slot key counts the releases and lost marks of its own slot
// ("released"); the record keeps a count of its own, moved by releases
// of older versions, and the total is Holders.Released. The head of the
// line measures the stagger on its own monotonic clock from the moment it
// first saw the total move (ReleaseClock), which for a waiter already in
// the blocking query is the wake-up the release caused. Under a stagger
// a release also rewrites the record (its "seq"), so that the grant's CAS
// still proves no release came after the read it judged; without one a
// release touches its own slot alone. (A holder decides by its own gate:
// one granted under a gate without a stagger, released after a commit
// that adds one, does not move the record, and a grant in the round trip
// after such a release is not held back by that release.) No clock of
// another host is read.
//
// # Slot keys: older versions
//
// Agents of versions before slot keys count the record's claims and the
// holder keys their sessions lock; they never read a slot key. So each
// write of the record by this version (a grant, ClaimDown, any Reclaim,
// any lost mark, a release under a stagger)
// writes into it, in the transaction that writes the slot key, a copy of
// every claim this version counts, its own new claim included. A
// release still writes its own slot key alone: it frees it naming the
// grant it releases ("freed": the claim's session and since, which every
// version's claim carries and an older version's rewrite of the record
// keeps). While both versions run:
//
//   - This version counts each name once. A claim in the record whose
//     grant a slot key names as freed counts no more; a claim in the
//     record and one in a slot key of the same grant are one claim, lost
//     if either copy says so (a head of either version marked it); of two
//     grants of one name (an older process of the node took it since),
//     the record's stands while it counts, and the name counts if either
//     does.
//   - A write of the record by this version keeps each claim the record
//     holds (bringing over a lost mark of the same grant's slot key), and
//     adds a slot key's claim only for a name the record lacks: an older
//     process's grant of a name is never replaced by the dead grant of
//     this version that it took over. A lost mark of a slot key's grant
//     where the record holds another grant of the name marks the slot key
//     alone.
//   - An older agent counts, by the copies, every claim that this version
//     counted at the record's last write by this version, and every claim
//     an older agent wrote since. A copy whose grant was released or
//     marked lost since still counts for it, until the next write of the
//     record by this version prunes it (or copies the mark): it may wait
//     longer, never take a slot beside a claim that counts. Its stagger
//     does not see this version's releases.
//   - An older agent's grants, reclaims, releases and lost marks write the
//     record as before, and this version reads and counts them; rewriting
//     the record, it keeps the copies of other names' claims (dropping only
//     what its shape lacks, such as seq). Grants of both versions CAS the
//     record, so they follow one another.
//
// A node whose agent goes back to an older version while its claim is in
// a slot key, and whose older process then takes and releases that claim
// in the record, leaves the slot key's grant counting for this version
// (and copied into the record again) until a head reports it lost after
// its lease: the safe side, at the cost of a wait and a lost report. A
// lost mark an older head wrote in the record's copy alone is copied into
// the slot key by the next write of the record by this version (any
// grant, ClaimDown, Reclaim, lost mark, or release that writes it), in
// its transaction, so that such a take and release does not bring the
// marked grant back to count.
//
// # Bounded reads
//
// Every name's token writes under P: its own contender and holder keys,
// and the shared record, slot keys and tail. So that what one token wrote
// does not make each join, head wake and hold check download it, a
// Semaphore on a client whose transport honours internal/readlimit (as
// coordinator.NewClient's does) bounds each listing of P (512 KiB) or
// P/.holders (128 KiB). Past it, that read and the next ones of the
// Semaphore go key by key (readSplit) until one leaves nothing unread: the
// record (under 1 MiB), then the names under the prefix (under 1 MiB, or
// past it folder by folder: each name's under 64 KiB, the slot keys'
// under 4 MiB), then each key under 4 KiB. The record is read first, so what is counted
// is never less than the count at the record's index, which the grant
// CASes: whatever raises the count after writes the record, and the keys
// it made before are named by the listing that follows.
//
// What a bounded read leaves unread is counted on the safe side, and
// logged (a warning, once per change): a slot key counts as a claim of no
// one's name, and no grant takes its number (so slot keys too large to
// read, by as many as K, stall the line until an operator removes them);
// a holder key counts as its name holding unless the session it is named
// by is gone (Consul never gives its ID again), and a name with more than
// 32 holder keys, or more names in its holder folder than 64 KiB, counts
// as holding without a read; a key that no session
// can lock (named by no ID of Consul's shape), a key no version writes,
// and a contender key over 4 KiB or past a name's 32 count for no one:
// such a contender loses its place in line, and the waiter behind it,
// watching its key, takes it for gone. A record, or the names of the
// slot keys or of the folders of names, over its bound fails the read
// (ErrUnreadable), retried as a Consul error is: nothing is granted
// meanwhile. On a client without the
// transport the reads are not bounded, as before.
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
// domain into its holder entry, slot key and claim, so the head judges it
// from the snapshot its grant's CAS of the record checks (see "Slot
// keys"), and a claim counts in its domain after its process died. The line stays FIFO: a head whose domain is full
// waits, and the line with it. A name of domain "" shares it with no one.
//
// KV layout under the semaphore prefix P:
//
//	P/.holders            JSON {"last": {...}, "seq": n, "released": n,
//	                      "holders": {...}, "claims": {...}}: the grant record,
//	                      CAS by every grant, ClaimDown and Reclaim, and by
//	                      releases under a stagger; last names the latest
//	                      grant, seq moves with every write; claims holds a
//	                      copy of every claim that counts, for older versions,
//	                      and their own; holders and released are what
//	                      versions before slot keys wrote there, still read
//	P/.holders/.slots/<i> JSON {"name", "session", "domain", "claim": {...},
//	                      "released": n, "freed": {"session", "since"}}: slot
//	                      i, taken by a grant or ClaimDown, renewed by Reclaim,
//	                      freed by its own release (name gone, released+1,
//	                      freed naming the grant released), marked lost by the
//	                      head of the line; each by CAS at its own index, and
//	                      all but a release without Gate.Stagger CAS the
//	                      record in the same transaction
//	P/.holders/<name>/<session>
//	                      one holder key per holder, locked by its session: the
//	                      holders that count; a record that disagrees (a dead
//	                      holder, or not JSON at all) is rewritten at the next
//	                      grant
//	P/.tail               the key of the contender that joined last, swapped
//	                      in by each join (a plain set after a read, in one
//	                      transaction: Consul applies them one at a time)
//	P/c/<name>/<session>  one contender key per waiter or holder, locked by its
//	                      session; the grant marks it "holding"
//
// A contender's own keys are filed under its Name, so that an ACL policy can
// let each name write its own (key_prefix "P/c/<name>/" and
// "P/.holders/<name>/") and no other's; the holders record, the tail and
// the slot keys (key_prefix "P/.holders/.slots/") are the only keys all
// share, which is why ".slots" is no Name. The name a holder key is filed under is the
// holder's name, whatever the record says. Keys named by session alone
// (P/c/<session>, P/.holders/<session>), as versions before wrote them, are
// still read: such a holder counts and such a waiter keeps its place, so a
// contender of this version never grants past one of an older version.
// So are the claims and holders an older version kept in the record: they
// count, and the first grant, reclaim or release of the name moves its
// claim into a slot key, in a transaction that CASes the record. An older
// version, during an upgrade, counts holders of this one by their holder
// keys and their claims by the record's copies (see "Slot keys: older
// versions").
package lockstep
