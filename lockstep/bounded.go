package lockstep

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/internal/readlimit"
)

// RecordLimit bounds the holders record as a bounded read takes it: a
// claim per name that holds or was lost, some 300 bytes each. Consul's own
// bound on a value (512 KiB by default) is below it.
const RecordLimit = 1 << 20

// KeyLimit bounds one contender, holder or slot key as a bounded read
// takes it: an entry or a slot record of a few hundred bytes (a claim's
// note is at most MaxNote).
const KeyLimit = 4 << 10

// Bounds of what a contender accepts from one read of the semaphore (see
// doc.go, "Bounded reads"), on a client whose transport honours them
// (coordinator.NewClient). Every node's token writes under the prefix: its
// own contender and holder keys, and the shared record, slot keys and
// tail. Past a listing's bound the prefix is read key by key instead
// (readSplit), each key under a bound of its own. The listing bounds
// decide only which way a read goes, never what it counts.
const (
	// lineListLimit bounds one listing of the whole prefix (a join): a
	// contender key of some 330 bytes per waiter, and the holders.
	lineListLimit = 512 << 10
	// holdersListLimit bounds one listing of the holders (the head of the
	// line, a release, a claim): the record, the slot keys and a holder
	// key per holder.
	holdersListLimit = 128 << 10
	// recordLimit bounds the holders record (RecordLimit).
	recordLimit = RecordLimit
	// keyLimit bounds one contender, holder or slot key (KeyLimit).
	keyLimit = KeyLimit
	// namesLimit bounds a listing of the key names under the prefix.
	namesLimit = 1 << 20
	// maxKeysPerName bounds the contender, and apart the holder, keys of
	// one name read one by one: a process has one of each per session.
	maxKeysPerName = 32
	// sessionLimit bounds the answer to a look-up of one session.
	sessionLimit = 64 << 10
	// maxSlotReads bounds the slot keys read one by one: one per name
	// that holds or claims, reused as they free.
	maxSlotReads = 256
)

// sessionID matches the IDs Consul gives sessions: only a key named by
// one can be locked by its session, and so count.
var sessionID = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// listLimit is the bound of one listing of prefix.
func (m *Semaphore) listLimit(prefix string) int64 {
	if prefix == m.opts.Prefix {
		return lineListLimit
	}
	return holdersListLimit
}

// splitPlan is how readSplit reads the keys under the prefix, from their
// names (planSplit).
type splitPlan struct {
	gets []string // read one by one, each under keyLimit
	// busy are names whose holder keys are past maxKeysPerName, left
	// unread: each counts as holding (only its own token writes there).
	busy []string
	// slotsUnread are slot numbers past maxSlotReads, left unread: each
	// counts as a claim, and no grant takes its number.
	slotsUnread []int
	// ignored are keys left unread that cannot count: no lockstep key, a
	// session no ID of Consul's names, or contender keys of a name past
	// maxKeysPerName or over keyLimit (only that name's place in line is
	// lost), or holder keys over keyLimit whose session is gone.
	ignored []string
	// check are holder keys over keyLimit: each counts unless the session
	// it is named by is gone (checkSessions).
	check []string
}

// planSplit plans the read of names, the keys under the semaphore at
// prefix. own, this contender's key, is always read: without it the
// contender would take itself for out of line.
func planSplit(prefix string, names []string, own string) splitPlan {
	var p splitPlan
	var slots []int
	groups := map[string][]string{} // <dir><name>: its keys
	for _, key := range names {
		rel := strings.TrimPrefix(key, prefix)
		switch ClassifyKey(rel) {
		case KeyRecord, KeyTail:
		case KeySlot:
			n, _ := slotNumber(rel[len(slotsPrefix):])
			slots = append(slots, n)
		case KeyLegacyEntry:
			// Only the policy of an older version writes these: read
			// them all, as they counted.
			if _, s, _ := strings.Cut(rel, "/"); sessionID.MatchString(s) {
				p.gets = append(p.gets, key)
			} else {
				p.ignored = append(p.ignored, key)
			}
		case KeyEntry:
			dir, rest, _ := strings.Cut(rel, "/")
			name, session, _, _ := splitEntry(rest)
			switch {
			case key == own:
				p.gets = append(p.gets, key)
			case sessionID.MatchString(session):
				groups[dir+"/"+name] = append(groups[dir+"/"+name], key)
			default:
				p.ignored = append(p.ignored, key)
			}
		default:
			p.ignored = append(p.ignored, key)
		}
	}
	for _, g := range slices.Sorted(maps.Keys(groups)) {
		keys := groups[g]
		switch dir, name, _ := strings.Cut(g, "/"); {
		case len(keys) <= maxKeysPerName:
			p.gets = append(p.gets, keys...)
		case dir+"/" == holderPrefix:
			p.busy = append(p.busy, name)
		default:
			p.ignored = append(p.ignored, keys...)
		}
	}
	// By number, as grants take the lowest free one.
	sort.Ints(slots)
	if len(slots) > maxSlotReads {
		p.slotsUnread = slots[maxSlotReads:]
		slots = slots[:maxSlotReads]
	}
	for _, n := range slots {
		p.gets = append(p.gets, SlotKey(prefix, n))
	}
	return p
}

// unread records in p a key that gets could not read within keyLimit: a
// slot key counts as a claim, a holder key is checked (checkSessions),
// and a contender key is ignored.
func (p *splitPlan) unread(prefix, key string) {
	rel := strings.TrimPrefix(key, prefix)
	switch {
	case ClassifyKey(rel) == KeySlot:
		n, _ := slotNumber(rel[len(slotsPrefix):])
		p.slotsUnread = append(p.slotsUnread, n)
	case strings.HasPrefix(rel, holderPrefix):
		p.check = append(p.check, key)
	default:
		p.ignored = append(p.ignored, key)
	}
}

// checkSessions settles the holder keys of p.check. One counts only while
// the session it is named by locks it, and a session that is gone locks
// nothing, now or later (Consul never gives its ID again): its key is
// ignored. Any other counts as its name holding (a key of an older
// version, named by session alone, as a name of its own), on the
// conservative side, whether its session locks it or not.
func (m *Semaphore) checkSessions(ctx context.Context, p *splitPlan) error {
	for _, key := range p.check {
		rel := strings.TrimPrefix(key, m.opts.Prefix+holderPrefix)
		name, session, legacy, _ := splitEntry(rel)
		info, _, err := m.c.Session().Info(session, (&api.QueryOptions{}).WithContext(readlimit.With(ctx, sessionLimit)))
		var tl *readlimit.TooLargeError
		switch {
		case err != nil && !errors.As(err, &tl):
			return consulErr{err}
		case err == nil && info == nil:
			p.ignored = append(p.ignored, key)
		case legacy:
			p.busy = append(p.busy, holderPrefix+rel) // a "/" in it: no one's name
		default:
			p.busy = append(p.busy, name)
		}
	}
	p.check = nil
	return nil
}

// problem says what p left unread, or is "".
func (p *splitPlan) problem(prefix string) string {
	var out []string
	if len(p.busy) > 0 {
		out = append(out, fmt.Sprintf("holder keys of %s over the size or number a contender reads: each counts as holding", quoted(p.busy)))
	}
	if len(p.slotsUnread) > 0 {
		ns := make([]string, len(p.slotsUnread))
		for i, n := range p.slotsUnread {
			ns[i] = fmt.Sprint(n)
		}
		out = append(out, fmt.Sprintf("slot keys %s under %s over the size or number a contender reads (any node's token may write there): each counts as a claim until an operator removes it", strings.Join(ns, ", "), prefix+slotsPrefix))
	}
	if len(p.ignored) > 0 {
		out = append(out, fmt.Sprintf("keys that count for no one, not read: %s", quoted(p.ignored)))
	}
	return strings.Join(out, "; ")
}

// quoted lists names, at most 10 of them, each cut at 120 bytes.
func quoted(names []string) string {
	var q []string
	for i, n := range names {
		if i == 10 {
			q = append(q, fmt.Sprintf("and %d more", len(names)-i))
			break
		}
		q = append(q, fmt.Sprintf("%.120q", n))
	}
	return strings.Join(q, ", ")
}

// readSplit reads prefix key by key, each under its bound: once a listing
// of it was over its bound (readWait). With index set, it first waits, on
// the names alone, for the prefix to move past index.
//
// It reads the holders record first, then the names, then the keys: not
// one snapshot, but what it counts is never less than the count at the
// record's index, which is what a grant CASes. Whatever raises the count
// writes the record, so after the record's read it fails the CAS; a key
// it made before is named by the listing that follows. Whatever goes
// between the reads only lowers the count (doc.go, "Slot keys").
func (m *Semaphore) readSplit(ctx context.Context, prefix string, index uint64, wait time.Duration) (*snapshot, error) {
	if index > 0 {
		// Only the answer's coming back matters, not what it says: cut
		// at its first bytes, it still tells that the prefix moved (or
		// the wait ran out).
		q := (&api.QueryOptions{WaitIndex: index, WaitTime: max(wait, time.Millisecond)}).WithContext(readlimit.With(ctx, 1))
		var tl *readlimit.TooLargeError
		if _, _, err := m.c.KV().Keys(prefix, "", q); err != nil && !errors.As(err, &tl) {
			return nil, consulErr{err}
		}
	}
	var pairs api.KVPairs
	rec, _, err := m.c.KV().Get(m.opts.Prefix+holdersKey, (&api.QueryOptions{}).WithContext(readlimit.With(ctx, recordLimit)))
	if err != nil {
		return nil, unreadable(err, m.opts.Prefix+holdersKey, "the holders record")
	}
	if rec != nil {
		pairs = append(pairs, rec)
	}
	l, err := m.listNames(ctx, prefix)
	if err != nil {
		return nil, err
	}
	plan := planSplit(m.opts.Prefix, l.names, m.key)
	plan.busy, plan.ignored = append(plan.busy, l.busy...), append(plan.ignored, l.ignored...)
	for _, key := range plan.gets {
		p, _, err := m.c.KV().Get(key, (&api.QueryOptions{}).WithContext(readlimit.With(ctx, keyLimit)))
		var tl *readlimit.TooLargeError
		switch {
		case errors.As(err, &tl):
			plan.unread(m.opts.Prefix, key)
		case err != nil:
			return nil, consulErr{err}
		case p != nil:
			pairs = append(pairs, p)
		}
	}
	if err := m.checkSessions(ctx, &plan); err != nil {
		return nil, err
	}
	// The wait is on the prefix, which holds the record, while a listing
	// folder by folder lists only P/.holders/: its index may be below the
	// record's, and a wait from it would return at once, each time.
	index = l.index
	if rec != nil {
		index = max(index, rec.ModifyIndex)
	}
	snap := parseSnapshot(m.opts.Prefix, pairs, index)
	snap.unread, snap.unreadSlots = plan.busy, plan.slotsUnread
	snap.problem = plan.problem(m.opts.Prefix)
	m.report(snap.problem)
	return snap, nil
}

// unreadable is err, from reading what of key, as the error a read
// returns: one over its bound is ErrUnreadable, retried as a Consul error
// is (nothing is granted meanwhile), with the reason in the retry's log.
func unreadable(err error, key, what string) error {
	var tl *readlimit.TooLargeError
	if errors.As(err, &tl) {
		return consulErr{fmt.Errorf("%w: %s (%.120q): %w", ErrUnreadable, what, key, err)}
	}
	return consulErr{err}
}

// report logs problem, what a bounded read left unread, when it is not
// the one logged last: each read under a flood would log it again.
func (m *Semaphore) report(problem string) {
	m.mu.Lock()
	same := problem == m.problem
	m.problem = problem
	m.mu.Unlock()
	if !same && problem != "" {
		m.log.Warn("keys under the semaphore's prefix left unread (a node's token may have written them)", "prefix", m.opts.Prefix, "problem", problem)
	}
}
