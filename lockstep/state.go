package lockstep

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
)

const (
	holdersKey      = ".holders"
	holderPrefix    = holdersKey + "/"
	contenderPrefix = "c/"
	// tailKey names the contender that joined last: each join swaps in its
	// own key in the transaction that joins.
	tailKey = ".tail"
)

// HoldersKey is the holders record under a semaphore's prefix, for tools
// and tests that read or write lockstep's layout (docs/kv-layout.md).
func HoldersKey(prefix string) string { return normPrefix(prefix) + holdersKey }

// ContenderKey is the key a contender of session, named name, takes under
// prefix. Its keys are filed under its name, so that an ACL policy can
// let a name write its own and no other's.
func ContenderKey(prefix, name, session string) string {
	return normPrefix(prefix) + contenderPrefix + name + "/" + session
}

// HolderKey is the key a holder of session, named name, locks under
// prefix while it holds.
func HolderKey(prefix, name, session string) string {
	return normPrefix(prefix) + holderPrefix + name + "/" + session
}

// KeyKind is what a key under a semaphore's prefix is, by its name alone.
type KeyKind int

// Values of KeyKind.
const (
	KeyUnexpected KeyKind = iota // no key lockstep writes
	KeyRecord                    // the holders record
	KeyTail                      // the line's tail
	KeyEntry                     // a contender or holder key: <dir>/<name>/<session>
	// KeyLegacyEntry is a contender or holder key named by session alone
	// (<dir>/<session>), as agents before per-name keys wrote them: still
	// counted, so that a holder of an older version is never granted past.
	KeyLegacyEntry
	// KeySlot is a slot key, .holders/.slots/<i>: a holder's claim.
	KeySlot
)

// ClassifyKey says what rel, a key relative to a semaphore's prefix, is.
func ClassifyKey(rel string) KeyKind {
	switch rel {
	case holdersKey:
		return KeyRecord
	case tailKey:
		return KeyTail
	}
	if isSlotKey(rel) {
		return KeySlot
	}
	for _, dir := range []string{holderPrefix, contenderPrefix} {
		if rest, ok := strings.CutPrefix(rel, dir); ok {
			if _, _, legacy, ok := splitEntry(rest); ok && legacy {
				return KeyLegacyEntry
			} else if ok {
				return KeyEntry
			}
		}
	}
	return KeyUnexpected
}

// splitEntry splits the part of a contender or holder key after its
// folder into the name and session it is filed under: <name>/<session>,
// or <session> alone for a key of an older version (legacy, no name).
func splitEntry(rest string) (name, session string, legacy, ok bool) {
	name, session, found := strings.Cut(rest, "/")
	if !found {
		return "", rest, true, validName(rest)
	}
	return name, session, false, validName(name) && session != "" && !strings.Contains(session, "/")
}

// validName says name can be one segment of a key: a policy that grants
// <dir>/<name>/ must grant that name alone.
func validName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.Contains(name, "/")
}

// Entry describes a contender, in its own key and in the holders record.
type Entry struct {
	Name  string    `json:"name"`
	State string    `json:"state"` // "waiting" or "holding"
	Since time.Time `json:"since"`
	// Domain is the contender's Options.Domain, "" for none.
	Domain string `json:"domain,omitempty"`
}

// holders is the record that is CAS-ed on every grant and release, which is
// what makes "fewer than K hold" atomic.
type holders struct {
	Holders map[string]Entry `json:"holders"`
	// Last is the latest grant. A waiter that finds the key of the waiter
	// ahead of it gone learns from it whether that one was granted (and
	// has released since), so that it heads the line, or left the line
	// without a grant, so that the line must be read.
	Last *grant `json:"last,omitempty"`
	// Claims are the slots held by name (a node), which outlive the
	// session that took them (see Claim). A record without them, from an
	// older version, counts only its live holders.
	Claims map[string]Claim `json:"claims,omitempty"`
	// Released counts the slots freed so far: each release, and each claim
	// marked lost, adds one. It tells every waiter that a slot was freed
	// (Gate.Stagger) with no clock in it: the record changes with grants
	// too, but only a release or a lost mark moves the count. Absent in a
	// record of an older version, which a release then starts from 1.
	// Releases of this version count in their slot keys instead (see
	// doc.go, "Slot keys"); a snapshot's holders add them up.
	Released uint64 `json:"released,omitempty"`
	// Seq moves with every write of the record by this version, so that
	// no write of it changes nothing (Consul skips those, and a CAS at
	// the index read would not fail).
	Seq uint64 `json:"seq,omitempty"`
}

// grant names a granted contender by its session and the CreateIndex of
// its contender key, which tells one join of a session from the next.
type grant struct {
	Session string `json:"session"`
	Joined  uint64 `json:"joined"`
}

// contender is one key under P/c/: a session in line, waiting or, once
// granted, holding.
type contender struct {
	Session     string
	Key         string
	CreateIndex uint64
	ModifyIndex uint64
	holding     bool // its key says it was granted
}

// snapshot is the semaphore's state from one read: of the whole prefix, or
// of the holders alone (P/.holders and the keys under P/.holders/), which is
// all the head of the line watches.
type snapshot struct {
	index uint64 // X-Consul-Index of the read, for blocking on it
	// holders is the record with the slot keys' claims and counts added
	// in (mergeSlots): what the count is judged on. record is the record
	// alone, as read, for its writers.
	holders      holders
	record       holders
	slots        []slotRef // in no order
	holdersIndex uint64    // ModifyIndex of the record, 0 when absent
	// live are the record's holders whose holder key their session still
	// locks; only they count against K.
	live       map[string]Entry
	contenders []contender // in CreateIndex order; empty in a holders-only read
	// bad says why the holders record could not be read, or is nil.
	bad error
	// unread are names counted as holding for holder keys a bounded read
	// left unread (readSplit), and unreadSlots the numbers of slot keys
	// it left unread, each counted as a claim: a key that could count and
	// was not read counts. problem says what was left unread, or is "".
	unread      []string
	unreadSlots []int
	problem     string
}

// parseSnapshot never fails: the holders that count are the sessions that
// lock their holder key, which only a grant creates, so a holders record
// that is not JSON (written by someone else) is reported in bad and
// overwritten, by CAS at its index, at the next grant or release. Failing
// instead would stall every rollout of the group until a person cleaned up.
func parseSnapshot(prefix string, pairs api.KVPairs, index uint64) *snapshot {
	s := &snapshot{index: index, holders: holders{Holders: map[string]Entry{}}}
	locked := map[string]named{} // sessions that lock their holder key
	for _, p := range pairs {
		rel := strings.TrimPrefix(p.Key, prefix)
		switch {
		case rel == holdersKey:
			s.holdersIndex = p.ModifyIndex
			if err := json.Unmarshal(p.Value, &s.holders); err != nil {
				s.bad = fmt.Errorf("lockstep: %s is not a holders record (the next grant or release rewrites it): %w", p.Key, err)
				s.holders = holders{}
			}
			if s.holders.Holders == nil {
				s.holders.Holders = map[string]Entry{}
			}
		case strings.HasPrefix(rel, slotsPrefix):
			s.parseSlot(p, rel[len(slotsPrefix):])
		case strings.HasPrefix(rel, holderPrefix):
			name, ok := lockedBy(p, rel[len(holderPrefix):])
			if !ok {
				continue
			}
			var e Entry
			_ = json.Unmarshal(p.Value, &e) // a grant wrote it; the record's copy wins below
			locked[p.Session] = named{e, name}
		case strings.HasPrefix(rel, contenderPrefix):
			// One over keyLimit is left out, as a bounded read leaves it
			// unread (readSplit) and the waiter behind it takes it for
			// gone (waitAhead): only its own name's token writes it, and
			// only its place in line is lost.
			if _, ok := lockedBy(p, rel[len(contenderPrefix):]); ok && len(p.Value) <= keyLimit {
				s.contenders = append(s.contenders, contender{Session: p.Session, Key: p.Key,
					CreateIndex: p.CreateIndex, ModifyIndex: p.ModifyIndex, holding: isHolding(p.Value)})
			}
		}
	}
	sort.Slice(s.contenders, func(i, j int) bool { return s.contenders[i].CreateIndex < s.contenders[j].CreateIndex })
	s.live = make(map[string]Entry, len(locked))
	for id, l := range locked {
		e := l.entry
		if rec, ok := s.holders.Holders[id]; ok {
			e = rec
		}
		if l.name != "" {
			// Only the name's own token may write under its name (see
			// ContenderKey); the record, every name's.
			e.Name = l.name
		}
		s.live[id] = e
	}
	s.mergeSlots()
	return s
}

// named is a holder key's entry and the name its key is filed under, ""
// for a key of an older version.
type named struct {
	entry Entry
	name  string
}

// lockedBy says whether p, a contender or holder key whose name after its
// folder is rest, is one its session locks, and under which name it is
// filed ("" for a key of an older version, named by session alone).
func lockedBy(p *api.KVPair, rest string) (name string, ok bool) {
	name, session, _, ok := splitEntry(rest)
	return name, ok && p.Session != "" && p.Session == session
}

// ahead returns the contenders in line before session that do not hold,
// oldest first. ok is false when session has no contender key.
func (s *snapshot) ahead(session string) (out []contender, ok bool) {
	for _, c := range s.contenders {
		if _, holds := s.live[c.Session]; holds || c.holding {
			continue
		}
		if c.Session == session {
			return out, true
		}
		out = append(out, c)
	}
	return nil, false
}

// Holders is a read-only view for status displays: who holds, and who waits
// in order.
type Holders struct {
	Holding map[string]Entry
	// Claims are the slots held by name; see Claim.
	Claims map[string]Claim
	// Released counts the slots freed so far (see ReleaseClock).
	Released uint64
	Waiting  []string // session IDs in queue order
	// contenders are the contender keys their sessions lock, for Names,
	// under prefix.
	contenders api.KVPairs
	prefix     string
	// Problem says why the holders record could not be read, or is "".
	// Holding is right all the same: it comes from the holder keys.
	Problem string
}

// ReadHolders reads the semaphore at prefix once.
func ReadHolders(c *api.Client, prefix string, q *api.QueryOptions) (*Holders, error) {
	pairs, _, err := c.KV().List(normPrefix(prefix), q)
	if err != nil {
		return nil, err
	}
	return ParseHolders(prefix, pairs), nil
}

// ParseHolders builds the view from pairs already listed, which may include
// keys outside prefix.
func ParseHolders(prefix string, pairs api.KVPairs) *Holders {
	prefix = normPrefix(prefix)
	var mine api.KVPairs
	for _, p := range pairs {
		if strings.HasPrefix(p.Key, prefix) {
			mine = append(mine, p)
		}
	}
	snap := parseSnapshot(prefix, mine, 0)
	h := &Holders{Holding: snap.live, Claims: snap.holders.Claims, Released: snap.holders.Released, prefix: prefix}
	if snap.bad != nil {
		h.Problem = snap.bad.Error()
	}
	for _, ct := range snap.contenders {
		if _, ok := h.Holding[ct.Session]; !ok {
			h.Waiting = append(h.Waiting, ct.Session)
		}
	}
	if msg := boundProblems(prefix, mine); msg != "" {
		h.Problem = strings.Join(slices.DeleteFunc([]string{h.Problem, msg}, func(s string) bool { return s == "" }), "; ")
	}
	for _, p := range mine {
		if rest, ok := strings.CutPrefix(p.Key, prefix+contenderPrefix); ok {
			if _, ok := lockedBy(p, rest); ok {
				h.contenders = append(h.contenders, p)
			}
		}
	}
	return h
}

// Names returns the name of every contender in line (waiting or holding),
// by session: the one its key is filed under. A status display tells from
// them whether a node that says it waits has a process in line at all: a
// key goes with its session, so a node whose process died has none. A key
// of an older version, named by session alone, names the name in its
// entry, decoded here, when asked, not by ParseHolders: agents parse the
// slot on every read and never need them; one that does not decode
// (written by someone else) names no one.
func (h *Holders) Names() map[string]string {
	names := map[string]string{}
	for _, p := range h.contenders {
		rest := strings.TrimPrefix(p.Key, h.prefix+contenderPrefix)
		if name, ok := lockedBy(p, rest); ok && name != "" {
			names[p.Session] = name
			continue
		}
		var e Entry
		if json.Unmarshal(p.Value, &e) == nil && e.Name != "" {
			names[p.Session] = e.Name
		}
	}
	return names
}

func normPrefix(p string) string {
	return strings.TrimSuffix(p, "/") + "/"
}

// boundProblems names what a bounded read of the slot (doc.go, "Bounded
// reads") cannot take and counts on the safe side, so that a group it
// stalls shows why where the slot is read whole, as `status` does: a name
// with more holder keys than a contender reads, or holder key names too
// long to list, counts as holding; a holder key too large to read counts
// as its name holding while its session lives; a slot key too large to
// read counts as a claim.
func boundProblems(prefix string, pairs api.KVPairs) string {
	keys, names := map[string]int{}, map[string]int{}
	var large, slots []string
	for _, p := range pairs {
		rest, ok := strings.CutPrefix(p.Key, prefix+holderPrefix)
		if !ok {
			continue
		}
		name, _, ok := strings.Cut(rest, "/")
		switch {
		case !ok:
		case name == slotsName && len(p.Value) > keyLimit:
			slots = append(slots, p.Key)
		case name == slotsName:
		default:
			keys[name]++
			names[name] += len(p.Key)
			if len(p.Value) > keyLimit {
				large = append(large, p.Key)
			}
		}
	}
	var over []string
	for _, name := range slices.Sorted(maps.Keys(keys)) {
		if keys[name] > maxKeysPerName || names[name] > folderNamesLimit {
			over = append(over, name)
		}
	}
	var msgs []string
	if len(over) > 0 {
		msgs = append(msgs, fmt.Sprintf("holder keys of %s past the %d (or %d bytes of names) a contender reads: a bounded read counts each such name as holding",
			quoted(over), maxKeysPerName, folderNamesLimit))
	}
	if len(large) > 0 {
		msgs = append(msgs, fmt.Sprintf("holder keys %s over %d bytes: a bounded read counts each one's name as holding while the session it names lives", quoted(large), keyLimit))
	}
	if len(slots) > 0 {
		msgs = append(msgs, fmt.Sprintf("slot keys %s over %d bytes: a bounded read counts each as a claim, and no grant takes its number", quoted(slots), keyLimit))
	}
	return strings.Join(msgs, "; ")
}
