package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/hashicorp/consul/api"
)

// Bounds of a read of the event log past the store's read limit, part by
// part (eventsSplit). A node's token writes its own part, as many and as
// large keys as it likes (only its honest agent prunes it), so each part
// other than the operators' is read under caps of its own: a node that
// floods its part makes history read a bounded amount more, and shows
// fewer of its own events, never fewer of anyone else's.
const (
	// eventPartLimit bounds the listing of one such part: a node's honest
	// part is DefaultNodeEventLimit events of some 600 bytes in a listing.
	eventPartLimit = 512 << 10
	// eventNamesLimit bounds the key names of a part over eventPartLimit,
	// listed to read its newest keys one by one.
	eventNamesLimit = 256 << 10
	// eventKeyLimit bounds one event read on its own: a record of a few
	// hundred bytes, and its reason.
	eventKeyLimit = 16 << 10
)

// Events reads group's log: in one listing when it fits the store's read
// limit, else part by part (eventsSplit). Either way a part other than the
// operators' gives at most its newest partEvents, and Problems names what
// was left out.
func (s *Store) Events(ctx context.Context, group string) (*EventLog, error) {
	k, err := s.Keys(group)
	if err != nil {
		return nil, err
	}
	pairs, _, err := s.list(withReadLimit(ctx, s.readLimit()), k.EventsPrefix(), nil)
	var tl *TooLargeError
	if errors.As(err, &tl) {
		return s.eventsSplit(ctx, k)
	}
	if err != nil {
		return nil, err
	}
	// Consul drops keys a token without a name may not read from a
	// listing without a word: an empty log must not hide that.
	if len(pairs) == 0 {
		if err := s.probeDenied(ctx, k.Desired()); err != nil {
			return nil, err
		}
	}
	var kept api.KVPairs
	var problems []string
	for _, part := range groupByPart(k, pairs) {
		ps, problem := s.newestOfPart(k, part)
		kept = append(kept, ps...)
		if problem != "" {
			problems = append(problems, problem)
		}
	}
	log := ParseEvents(k, kept)
	log.Problems = append(problems, log.Problems...)
	return log, nil
}

// eventPartOf is the part of the log key is in: the operators', a
// node's, another folder under events/ (no writer of this version writes
// one), or events/ itself for a key from before the parts.
func eventPartOf(k Keys, key string) string {
	rel := strings.TrimPrefix(key, k.EventsPrefix())
	if rest, ok := strings.CutPrefix(key, k.NodeEventsPrefix()); ok {
		if node, _, ok := strings.Cut(rest, "/"); ok {
			return k.NodeEventsPrefix() + node + "/"
		}
		return k.NodeEventsPrefix()
	}
	if dir, _, ok := strings.Cut(rel, "/"); ok {
		return k.EventsPrefix() + dir + "/"
	}
	return k.EventsPrefix()
}

// groupByPart splits a listing of the log by part, parts in key order.
func groupByPart(k Keys, pairs api.KVPairs) []api.KVPairs {
	byPart := map[string]api.KVPairs{}
	var order []string
	for _, p := range pairs {
		part := eventPartOf(k, p.Key)
		if _, ok := byPart[part]; !ok {
			order = append(order, part)
		}
		byPart[part] = append(byPart[part], p)
	}
	sort.Strings(order)
	out := make([]api.KVPairs, 0, len(order))
	for _, part := range order {
		out = append(out, byPart[part])
	}
	return out
}

// partEvents is how many events of the part named prefix a reader keeps,
// the newest; 0 keeps them all. Only an operator's token writes the
// operators' part, which their appends prune, so it is kept whole. A
// node's honest agent keeps its own part to its limit (a little more
// when a prune failed); the keys from before the parts were pruned to the
// operators' limit.
func (s *Store) partEvents(k Keys, prefix string) int {
	switch {
	case prefix == k.OperatorEvents():
		return 0
	case prefix == k.EventsPrefix():
		return s.eventLimit(OperatorWriter())
	}
	return 2 * s.eventLimit(NodeWriter(""))
}

// newestOfPart keeps the newest events of one part, all of it read, by
// the order Consul applied them, and says what it left out.
func (s *Store) newestOfPart(k Keys, part api.KVPairs) (api.KVPairs, string) {
	prefix := eventPartOf(k, part[0].Key)
	n := s.partEvents(k, prefix)
	if n == 0 || len(part) <= n {
		return part, ""
	}
	sortApplied(part)
	return part[len(part)-n:], cutProblem(prefix, len(part), n)
}

func cutProblem(prefix string, have, kept int) string {
	return fmt.Sprintf("%.120q has %d events, more than the %d a part shows (its writer did not prune it): the oldest %d are not shown",
		prefix, have, kept, have-kept)
}

// ParseEvents decodes the pairs of a log, every writer's part merged in
// the order Consul applied them, which no writer chooses: by CreateIndex,
// and within one transaction by key. Each says whose part it was in.
func ParseEvents(k Keys, pairs api.KVPairs) *EventLog {
	log := &EventLog{}
	for _, p := range pairs {
		var e Event
		if err := decode(p.Key, p.Value, &e); err != nil {
			log.Problems = append(log.Problems, err.Error())
			continue
		}
		w := k.writerOf(p.Key)
		log.Events = append(log.Events, LoggedEvent{Event: e, Key: p.Key, CreateIndex: p.CreateIndex, Writer: w, Vouched: vouched(w, e)})
	}
	sort.SliceStable(log.Events, func(i, j int) bool {
		a, b := log.Events[i], log.Events[j]
		if a.CreateIndex != b.CreateIndex {
			return a.CreateIndex < b.CreateIndex
		}
		return strings.Compare(a.Key, b.Key) < 0
	})
	return log
}
