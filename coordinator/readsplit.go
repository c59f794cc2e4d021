package coordinator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/lockstep"
)

// slotKeyKind is what a key under a group's slot/ is, by its name.
type slotKeyKind int

const (
	slotUnexpected slotKeyKind = iota // no key lockstep writes
	slotRecord                        // the holders record
	slotTail                          // the line's tail: status has no use for it
	slotEntry                         // a holder or contender key: an entry of a session
	// slotLegacy is a holder or contender key named by session alone, as
	// agents wrote them before their keys were filed under their node:
	// read and counted as lockstep counts it, and named as a problem.
	slotLegacy
	// slotNumbered is a slot key (.holders/.slots/<i>): a claim each,
	// read one by one as an entry is, under a cap of its own, as every
	// node's token may write the shared folder.
	slotNumbered
)

// classifySlotKey says what rel, a key relative to the slot's prefix, is
// by its name, which lockstep's layout fixes (lockstep/doc.go). An entry
// filed under a name that is no valid node name is unexpected: no agent
// writes it.
func classifySlotKey(rel string) slotKeyKind {
	switch lockstep.ClassifyKey(rel) {
	case lockstep.KeyRecord:
		return slotRecord
	case lockstep.KeyTail:
		return slotTail
	case lockstep.KeyLegacyEntry:
		return slotLegacy
	case lockstep.KeySlot:
		return slotNumbered
	case lockstep.KeyEntry:
		_, rest, _ := strings.Cut(rel, "/")
		if name, _, _ := strings.Cut(rest, "/"); hashspec.ValidateName(name) == nil {
			return slotEntry
		}
	}
	return slotUnexpected
}

// slotNum is the number of key, a slot key (slotNumbered).
func slotNum(key string) int {
	n, _ := strconv.Atoi(key[strings.LastIndexByte(key, '/')+1:])
	return n
}

// splitPlan is how a group's tree too large to list at once is read: the
// top-level keys one by one, every top-level folder but slot/ as a listing
// of its own, and the slot's keys that lockstep writes one by one, each
// under the bound its kind has; the other keys under slot/ are named, not
// read.
type splitPlan struct {
	gets  []string // top-level keys
	lists []string // top-level folders, with their "/"
	// slot is the record first, then at most maxSlotNumbers slot keys,
	// then at most maxSlotKeys entries: each kind under a cap of its own,
	// so that slot keys, which sort first and any node's token may write,
	// never push the holder and contender keys out of the read.
	slot       []string
	unexpected []string // keys under slot/ no lockstep writes
	skipped    int      // entries beyond maxSlotKeys, not read
	// skippedSlots are slot keys beyond maxSlotNumbers, not read.
	skippedSlots int
}

// planSplit makes the plan from the names of every key of the group.
func planSplit(k Keys, names []string) splitPlan {
	var p splitPlan
	lists := map[string]bool{}
	var entries, numbered []string
	for _, name := range names {
		rel := strings.TrimPrefix(name, k.Root())
		if srel, ok := strings.CutPrefix(name, k.Slot()); ok {
			switch classifySlotKey(srel) {
			case slotRecord:
				p.slot = append([]string{name}, p.slot...)
			case slotEntry, slotLegacy:
				entries = append(entries, name)
			case slotNumbered:
				numbered = append(numbered, name)
			case slotUnexpected:
				p.unexpected = append(p.unexpected, name)
			}
			continue
		}
		if sha, ok := failuresSHA(k, name); ok {
			// By SHA: only the desired SHA's failures close the gate if
			// they cannot be read (failuresUnread).
			lists[k.FailuresPrefix(sha)] = true
		} else if dir, _, ok := strings.Cut(rel, "/"); ok {
			lists[k.Root()+dir+"/"] = true
		} else {
			p.gets = append(p.gets, name)
		}
	}
	// By number, as grants take the lowest free one: in text order a
	// flood numbered from 10000 would sort before slot 2.
	slices.SortFunc(numbered, func(a, b string) int { return cmp.Compare(slotNum(a), slotNum(b)) })
	if len(numbered) > maxSlotNumbers {
		p.skippedSlots = len(numbered) - maxSlotNumbers
		numbered = numbered[:maxSlotNumbers]
	}
	if len(entries) > maxSlotKeys {
		p.skipped = len(entries) - maxSlotKeys
		entries = entries[:maxSlotKeys]
	}
	p.slot = append(append(p.slot, numbered...), entries...)
	for dir := range lists {
		p.lists = append(p.lists, dir)
	}
	sort.Strings(p.lists)
	return p
}

// readSplit reads the group's tree when one listing of it is over the
// read limit: some node's token wrote more than the group's records can
// take, under its own keys of slot/ say. It lists the key
// names alone, then reads by plan (planSplit): each read bounded, what
// is over its bound or no record of rollagent's named in Problems, and the
// rest read as Read reads it. The reads are not one snapshot: Index is
// the listing's, and each part is as recent as its own read.
func (s *Store) readSplit(ctx context.Context, k Keys, group string, q *api.QueryOptions) (*GroupState, error) {
	if q == nil {
		q = &api.QueryOptions{}
	}
	names, meta, unnamed, err := s.splitNames(ctx, k, q)
	if err != nil {
		return nil, err
	}
	plan := planSplit(k, names)
	problems := append([]string{fmt.Sprintf("%s: the group's tree is over the %d bytes a read accepts; read part by part", k.Root(), s.readLimit())}, unnamed...)
	r := &splitReader{s: s, k: k}
	for _, key := range plan.gets {
		if err := r.read(ctx, key, s.readLimit(), false); err != nil {
			return nil, err
		}
	}
	r.desired = desiredSHA(k, r.pairs)
	for _, dir := range plan.lists {
		// history/ grows with every commit and only an operator's token
		// writes it: it is read whole.
		limit := s.readLimit()
		if dir == k.HistoryPrefix() {
			limit = 1 << 62
		}
		if err := r.read(ctx, dir, limit, true); err != nil {
			return nil, err
		}
	}
	for i, key := range plan.slot {
		limit := int64(slotKeyLimit)
		if i == 0 && strings.TrimPrefix(key, k.Slot()) == ".holders" {
			limit = slotRecordLimit
		}
		if err := r.read(ctx, key, limit, false); err != nil {
			return nil, err
		}
	}
	problems = append(problems, splitProblems(plan, r.tooLarge)...)
	if msg := unexpectedSlotKeys(k, plan.unexpected); msg != "" {
		problems = append(problems, msg)
	}
	g := Parse(k, group, r.pairs, meta.LastIndex)
	for _, sha := range r.failedUnread {
		g.failedSHA[sha] = true
	}
	g.Problems = append(problems, g.Problems...)
	return g, nil
}

// splitReader gathers what readSplit reads of a group's tree part by part.
type splitReader struct {
	s       *Store
	k       Keys
	desired string // the desired SHA, once read
	pairs   api.KVPairs
	// tooLarge are the keys left unread, quoted; failedUnread the SHAs
	// whose failures were left unread.
	tooLarge, failedUnread []string
}

// read reads key, or lists it, accepting at most limit bytes. A part over
// it is left unread and named, unless the gate needs it: the read then
// fails.
func (r *splitReader) read(ctx context.Context, key string, limit int64, list bool) error {
	var ps api.KVPairs
	var err error
	if list {
		ps, _, err = r.s.list(withReadLimit(ctx, limit), key, nil)
	} else {
		var p *api.KVPair
		if p, _, err = r.s.Get(withReadLimit(ctx, limit), key, nil); p != nil {
			ps = api.KVPairs{p}
		}
	}
	var tl *TooLargeError
	if sha, ok := failuresSHA(r.k, key); ok && r.desired != "" && sha != r.desired && errors.As(err, &tl) {
		// Another SHA's failures: it counts as failed, which keeps a
		// rollback from going back to it; nothing else reads them.
		r.failedUnread = append(r.failedUnread, sha)
	} else if errors.As(err, &tl) && gateRead(r.k, key) {
		return fmt.Errorf("%w: %.120q is over the size a reader accepts: %w", ErrGateUnread, key, err)
	}
	if errors.As(err, &tl) {
		r.tooLarge = append(r.tooLarge, fmt.Sprintf("%.120q", key))
		return nil
	}
	r.pairs = append(r.pairs, ps...)
	return err
}

// splitNames lists the names of the group's keys folder by folder, each
// listing bounded: one node's token may write keys with long names in
// what it may write (its part of the event log, say), and one listing of
// the whole tree would let it fail every read. The event log is left out
// (Events reads it; a group's state is not made of it); a folder the gate
// is judged on whose names are over the bound fails the read
// (ErrGateUnread), any other is named in the problems, unread.
func (s *Store) splitNames(ctx context.Context, k Keys, q *api.QueryOptions) ([]string, *api.QueryMeta, []string, error) {
	top, meta, err := s.c.KV().Keys(k.Root(), "/", q.WithContext(withReadLimit(ctx, keyNamesLimit)))
	if err != nil {
		return nil, nil, nil, s.readError(err, k.Root())
	}
	if err := s.checkMeta(ctx, meta); err != nil {
		return nil, nil, nil, err
	}
	var names, problems []string
	for _, t := range top {
		if !strings.HasSuffix(t, "/") {
			names = append(names, t)
			continue
		}
		if t == k.EventsPrefix() {
			continue
		}
		ns, _, err := s.c.KV().Keys(t, "", (&api.QueryOptions{}).WithContext(withReadLimit(ctx, keyNamesLimit)))
		var tl *TooLargeError
		switch {
		case errors.As(err, &tl) && gateRead(k, t):
			return nil, nil, nil, fmt.Errorf("%w: the names under %.120q are over the size a reader accepts: %w", ErrGateUnread, t, err)
		case errors.As(err, &tl):
			problems = append(problems, fmt.Sprintf("%.120q: the names of its keys are over the size a reader accepts; not read", t))
			continue
		case err != nil:
			return nil, nil, nil, s.readError(err, t)
		}
		names = append(names, ns...)
	}
	return names, meta, problems, nil
}

// splitProblems names what a split read left unread.
func splitProblems(p splitPlan, tooLarge []string) []string {
	var out []string
	if len(tooLarge) > 0 {
		out = append(out, "over the size a reader accepts, not read (a node's token may have written them): "+listed(tooLarge))
	}
	if p.skipped > 0 {
		out = append(out, fmt.Sprintf("slot/ has %d more contender or holder keys than the %d read", p.skipped, maxSlotKeys))
	}
	if p.skippedSlots > 0 {
		out = append(out, fmt.Sprintf("slot/.holders/.slots/ has %d more slot keys than the %d read (any node's token may write there; the claims in those left unread are not shown)", p.skippedSlots, maxSlotNumbers))
	}
	return out
}

// unexpectedSlotKeys names the keys under slot/ that lockstep never
// writes, which Parse reports and nothing reads.
func unexpectedSlotKeys(k Keys, names []string) string {
	var odd []string
	for _, n := range names {
		if rel, ok := strings.CutPrefix(n, k.Slot()); ok && classifySlotKey(rel) == slotUnexpected {
			odd = append(odd, fmt.Sprintf("%.120q", n))
		}
	}
	if len(odd) == 0 {
		return ""
	}
	return "keys under slot/ that no agent writes (a node's token may have), not read: " + listed(odd)
}

// legacySlotKeys names the holder and contender keys under slot/ that
// are named by session alone, as agents of an older version wrote them,
// which no agent's policy may write any more.
func legacySlotKeys(k Keys, names []string) string {
	var old []string
	for _, n := range names {
		if rel, ok := strings.CutPrefix(n, k.Slot()); ok && classifySlotKey(rel) == slotLegacy {
			old = append(old, fmt.Sprintf("%.120q", n))
		}
	}
	if len(old) == 0 {
		return ""
	}
	return "slot keys named by session alone, as agents of an older version write them (counted all the same; see the README, Upgrading to per-node slot keys): " + listed(old)
}

// listed joins names, at most maxListed of them, and says how many more.
func listed(names []string) string {
	sort.Strings(names)
	if n := len(names); n > maxListed {
		names = append(names[:maxListed:maxListed], fmt.Sprintf("and %d more", n-maxListed))
	}
	return strings.Join(names, ", ")
}

// gateRead says key is, or holds, what the gate and the failure budget
// are judged on: desired, the brakes, every key a KeyRule closes by (its
// Keys for sha "", the folder of every SHA's), failures and the progress
// deadline. Left unread, a CANCEL or a failure would pass for absent and
// open the gate, so a read that cannot take one fails instead, and its
// reader acts on nothing until it can.
func gateRead(k Keys, key string) bool {
	if key == k.Desired() {
		return true
	}
	dirs := append([]string{k.BrakesPrefix(), strings.TrimSuffix(k.FailuresPrefix(""), "/"), k.FailCount(""), k.Deadline("")},
		append(k.Closing(""), k.Brakes("")...)...)
	for _, dir := range dirs {
		if strings.HasPrefix(key, dir) {
			return true
		}
	}
	return false
}

// failuresSHA is the SHA of a key under failures/<sha>/, or of that folder.
func failuresSHA(k Keys, key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, strings.TrimSuffix(k.FailuresPrefix(""), "/"))
	if !ok {
		return "", false
	}
	sha, _, ok := strings.Cut(rest, "/")
	return sha, ok && sha != ""
}

// desiredSHA is the SHA desired names among pairs, or "" when it is not
// there or does not decode (then every SHA's failures are read as the
// desired one's: fail closed).
func desiredSHA(k Keys, pairs api.KVPairs) string {
	for _, p := range pairs {
		var d Desired
		if p.Key == k.Desired() && decode(p.Key, p.Value, &d) == nil {
			return d.SHA
		}
	}
	return ""
}
