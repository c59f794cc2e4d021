package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/hashicorp/consul/api"
	"golang.org/x/sync/errgroup"
)

// eventsSplit reads the log when one listing of it is over the read
// limit: some node's token wrote more than its part can take. It lists
// the parts by name, then reads each on its own: the operators' whole (only
// an operator's token writes it), every other under eventPartLimit, and
// one over it by its newest key names (its writer's clock starts each,
// so a writer that names its keys to sort last pushes out its own events
// alone), each under eventKeyLimit. What it leaves unread it names in
// Problems. The parts are not one snapshot.
func (s *Store) eventsSplit(ctx context.Context, k Keys) (*EventLog, error) {
	r := &eventReader{s: s, k: k}
	parts, loose, err := r.parts(ctx)
	if err != nil {
		return nil, err
	}
	if err := r.readParts(ctx, parts); err != nil {
		return nil, err
	}
	for _, prefix := range []string{k.EventsPrefix(), k.NodeEventsPrefix()} {
		if err := r.newest(ctx, prefix, loose[prefix]); err != nil {
			return nil, err
		}
	}
	if len(r.tooLarge) > 0 {
		r.problems = append(r.problems, "events over the size a reader accepts, not read (a node's token may have written them): "+listed(r.tooLarge))
	}
	log := ParseEvents(k, r.pairs)
	log.Problems = append(r.problems, log.Problems...)
	return log, nil
}

// eventPartReads is how many parts of the log eventsSplit reads at once:
// a large fleet's log is past the read limit by its honest parts alone
// (some 240 nodes with full parts), one request each.
const eventPartReads = 8

// readParts reads the parts, eventPartReads at a time, each into an
// eventReader of its own, and gathers what they read in the parts' order.
func (r *eventReader) readParts(ctx context.Context, parts []string) error {
	each := make([]*eventReader, len(parts))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(eventPartReads)
	for i, part := range parts {
		each[i] = &eventReader{s: r.s, k: r.k}
		g.Go(func() error { return each[i].part(gctx, part) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	for _, e := range each {
		r.pairs = append(r.pairs, e.pairs...)
		r.problems = append(r.problems, e.problems...)
		r.tooLarge = append(r.tooLarge, e.tooLarge...)
	}
	return nil
}

// eventReader gathers what eventsSplit reads of the log part by part.
type eventReader struct {
	s        *Store
	k        Keys
	pairs    api.KVPairs
	problems []string
	tooLarge []string // keys left unread, quoted
}

// parts are the folders of the log, the operators' and each node's among
// them, and the keys directly under events/ (from before the parts) and
// events/node/ (no node's part), by the level they are in. A level whose
// names are over the size a reader accepts is named in the problems and
// left out, but for the operators' part, which is read whatever else is.
func (r *eventReader) parts(ctx context.Context) (parts []string, loose map[string][]string, err error) {
	top, err := r.names(ctx, r.k.EventsPrefix(), "/", keyNamesLimit)
	if err != nil {
		return nil, nil, err
	}
	parts, loose = []string{r.k.OperatorEvents()}, map[string][]string{}
	for _, t := range top {
		if t == r.k.NodeEventsPrefix() {
			nodes, err := r.names(ctx, t, "/", keyNamesLimit)
			if err != nil {
				return nil, nil, err
			}
			parts = fileNames(parts, loose, t, nodes)
			continue
		}
		if t != r.k.OperatorEvents() {
			parts = fileNames(parts, loose, r.k.EventsPrefix(), []string{t})
		}
	}
	return parts, loose, nil
}

// fileNames files names, listed under level up to a "/", as parts (a
// folder) or loose keys of level.
func fileNames(parts []string, loose map[string][]string, level string, names []string) []string {
	for _, n := range names {
		switch {
		case n == level:
		case strings.HasSuffix(n, "/"):
			parts = append(parts, n)
		default:
			loose[level] = append(loose[level], n)
		}
	}
	return parts
}

// names lists the key names under prefix up to sep, bounded by limit:
// over it, the level is named in the problems and no name is returned.
func (r *eventReader) names(ctx context.Context, prefix, sep string, limit int64) ([]string, error) {
	names, meta, err := r.s.c.KV().Keys(prefix, sep, (&api.QueryOptions{}).WithContext(withReadLimit(ctx, limit)))
	var tl *TooLargeError
	if errors.As(err, &tl) {
		r.problems = append(r.problems, fmt.Sprintf("%.120q: the names of its keys are over the size a reader accepts; not read", prefix))
		return nil, nil
	}
	if err != nil {
		return nil, r.s.readError(err, prefix)
	}
	if err := r.s.checkMeta(ctx, meta); err != nil {
		return nil, err
	}
	if meta.ResultsFilteredByACLs {
		return nil, fmt.Errorf("%w: the token may not read everything under %s, so Consul left keys out of the listing", ErrACLDenied, prefix)
	}
	return names, nil
}

// part reads one part of the log: whole if it fits its bound, keeping the
// newest partEvents, else by its newest key names.
func (r *eventReader) part(ctx context.Context, prefix string) error {
	limit := int64(eventPartLimit)
	if prefix == r.k.OperatorEvents() {
		limit = 1 << 62
	}
	ps, _, err := r.s.list(withReadLimit(ctx, limit), prefix, nil)
	var tl *TooLargeError
	switch {
	case errors.As(err, &tl):
		names, err := r.names(ctx, prefix, "", eventNamesLimit)
		if err != nil {
			return err
		}
		return r.newest(ctx, prefix, names)
	case err != nil:
		return err
	case len(ps) == 0:
		return nil
	}
	kept, problem := r.s.newestOfPart(r.k, ps)
	r.pairs = append(r.pairs, kept...)
	if problem != "" {
		r.problems = append(r.problems, problem)
	}
	return nil
}

// newest reads the newest partEvents of names, the keys of the part named
// prefix, by name, one by one, each under eventKeyLimit.
func (r *eventReader) newest(ctx context.Context, prefix string, names []string) error {
	sort.Sort(sort.Reverse(sort.StringSlice(names)))
	if n := r.s.partEvents(r.k, prefix); n > 0 && len(names) > n {
		r.problems = append(r.problems, cutProblem(prefix, len(names), n))
		names = names[:n]
	}
	for _, key := range names {
		p, _, err := r.s.Get(withReadLimit(ctx, eventKeyLimit), key, nil)
		var tl *TooLargeError
		switch {
		case errors.As(err, &tl):
			r.tooLarge = append(r.tooLarge, fmt.Sprintf("%.120q", key))
		case err != nil:
			return err
		case p != nil:
			r.pairs = append(r.pairs, p)
		}
	}
	return nil
}
