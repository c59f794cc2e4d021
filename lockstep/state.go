package lockstep

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
)

const (
	holdersKey      = ".holders"
	contenderPrefix = "c/"
)

// Entry describes a contender, in its own key and in the holders record.
type Entry struct {
	Name  string    `json:"name"`
	State string    `json:"state"` // "waiting" or "holding"
	Since time.Time `json:"since"`
}

// holders is the record that is CAS-ed on every grant and release, which is
// what makes "fewer than K hold" atomic.
type holders struct {
	Holders map[string]Entry `json:"holders"`
}

// contender is one key under P/c/.
type contender struct {
	Session     string
	Key         string
	CreateIndex uint64
}

// snapshot is the semaphore's state from one recursive read of its prefix.
type snapshot struct {
	index        uint64 // X-Consul-Index of the read, for blocking on the prefix
	holders      holders
	holdersIndex uint64 // ModifyIndex of the record, 0 when absent
	contenders   []contender
	// unknown lists holders whose contender key is gone: their session died
	// or they released and the record has not caught up. They do not count.
	unknown []string
}

func parseSnapshot(prefix string, pairs api.KVPairs, index uint64) (*snapshot, error) {
	s := &snapshot{index: index, holders: holders{Holders: map[string]Entry{}}}
	for _, p := range pairs {
		rel := strings.TrimPrefix(p.Key, prefix)
		switch {
		case rel == holdersKey:
			s.holdersIndex = p.ModifyIndex
			if err := json.Unmarshal(p.Value, &s.holders); err != nil {
				return nil, fmt.Errorf("lockstep: %s is not a holders record: %w", p.Key, err)
			}
			if s.holders.Holders == nil {
				s.holders.Holders = map[string]Entry{}
			}
		case strings.HasPrefix(rel, contenderPrefix) && p.Session != "":
			s.contenders = append(s.contenders, contender{Session: p.Session, Key: p.Key, CreateIndex: p.CreateIndex})
		}
	}
	sort.Slice(s.contenders, func(i, j int) bool { return s.contenders[i].CreateIndex < s.contenders[j].CreateIndex })
	present := make(map[string]bool, len(s.contenders))
	for _, c := range s.contenders {
		present[c.Session] = true
	}
	for id := range s.holders.Holders {
		if !present[id] {
			s.unknown = append(s.unknown, id)
		}
	}
	sort.Strings(s.unknown)
	return s, nil
}

// live returns the holders whose session still locks a contender key.
func (s *snapshot) live() map[string]Entry {
	out := make(map[string]Entry, len(s.holders.Holders))
	for id, e := range s.holders.Holders {
		if !slices.Contains(s.unknown, id) {
			out[id] = e
		}
	}
	return out
}

// position returns where session waits among the contenders that do not
// hold, and its predecessor's key ("" for the head). ok is false when
// session has no contender key.
func (s *snapshot) position(session string) (pos int, pred string, ok bool) {
	live := s.live()
	pos = 0
	for _, c := range s.contenders {
		if _, holds := live[c.Session]; holds {
			continue
		}
		if c.Session == session {
			return pos, pred, true
		}
		pred = c.Key
		pos++
	}
	return 0, "", false
}

// Holders is a read-only view for status displays: who holds, and who waits
// in order.
type Holders struct {
	Holding map[string]Entry
	Waiting []string // session IDs in queue order
}

// ReadHolders reads the semaphore at prefix once.
func ReadHolders(c *api.Client, prefix string, q *api.QueryOptions) (*Holders, error) {
	pairs, _, err := c.KV().List(normPrefix(prefix), q)
	if err != nil {
		return nil, err
	}
	return ParseHolders(prefix, pairs)
}

// ParseHolders builds the view from pairs already listed, which may include
// keys outside prefix.
func ParseHolders(prefix string, pairs api.KVPairs) (*Holders, error) {
	prefix = normPrefix(prefix)
	var mine api.KVPairs
	for _, p := range pairs {
		if strings.HasPrefix(p.Key, prefix) {
			mine = append(mine, p)
		}
	}
	snap, err := parseSnapshot(prefix, mine, 0)
	if err != nil {
		return nil, err
	}
	h := &Holders{Holding: snap.live()}
	for _, ct := range snap.contenders {
		if _, ok := h.Holding[ct.Session]; !ok {
			h.Waiting = append(h.Waiting, ct.Session)
		}
	}
	return h, nil
}

func normPrefix(p string) string {
	return strings.TrimSuffix(p, "/") + "/"
}
