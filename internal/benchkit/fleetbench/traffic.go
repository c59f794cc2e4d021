package fleetbench

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/coordinator"
)

// Request classes of the fleet benchmark. Liveness (TTL check passes and
// session renewals) is kept apart: it grows with how long a node waits in
// line, not with what it does, so it is per node O(N) at K=1 by design of
// TTL-bound sessions.
const (
	fleetCoord = iota // KV and txn: the rollout's own reads and writes
	fleetLive         // TTL check passes, session renewals
	fleetSetup        // sessions, checks and services made or removed, agent reads
	fleetClasses
)

// What the bytes of a response were read for: the agent's read of its
// group's whole tree (coordinator.Store.Read), lockstep's reads of the
// slot, and everything else.
const (
	bytesGroup = iota
	bytesSlot
	bytesOther
	bytesKinds
)

func bytesKindOf(path string) int {
	rest, ok := strings.CutPrefix(path, "/v1/kv/"+coordinator.DefaultPrefix+"groups/")
	switch {
	case !ok:
		return bytesOther
	case strings.Contains(rest, "/slot/"):
		return bytesSlot
	case strings.Count(rest, "/") == 1 && strings.HasSuffix(rest, "/"):
		return bytesGroup
	}
	return bytesOther
}

// countingBody counts the bytes read from a response body.
type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// fleetEvent is one request sent while a fleetTraffic records.
type fleetEvent struct {
	at      time.Duration // since recording started
	class   uint8
	read    bool // GET
	enqueue bool // a contender key taken: someone joined the line
}

// fleetTraffic counts the requests of every agent of one fleet. Each agent
// has its own client and transport (fleetClient); only this tally is
// shared.
type fleetTraffic struct {
	total [fleetClasses]atomic.Int64 // always counted, to tell when the fleet is quiet

	recording atomic.Bool
	slowLive  atomic.Int64 // longest liveness request while recording, in ns
	// liveSince holds when each liveness request still in flight began
	// (keyed by its *http.Request), so that one stuck past the end of
	// the case counts too.
	liveSince sync.Map
	// bytes read while recording, by bytesKindOf (uncompressed, as sent)
	bytes  [bytesKinds]atomic.Int64
	mu     sync.Mutex
	start  time.Time
	events []fleetEvent
	// endpoints counts requests while recording by what they are for
	// (endpointOf).
	endpoints map[string]int64
}

func fleetClassOf(path string) int {
	switch {
	case strings.HasPrefix(path, "/v1/kv/"), path == "/v1/txn":
		return fleetCoord
	case strings.HasPrefix(path, "/v1/agent/check/update/"), strings.HasPrefix(path, "/v1/agent/check/pass/"),
		strings.HasPrefix(path, "/v1/session/renew/"):
		return fleetLive
	}
	return fleetSetup
}

func (t *fleetTraffic) note(r *http.Request) {
	class := fleetClassOf(r.URL.Path)
	t.total[class].Add(1)
	if !t.recording.Load() {
		return
	}
	enqueue, endpoint := joinsLine(r), endpointOf(r)
	t.mu.Lock()
	t.events = append(t.events, fleetEvent{at: time.Since(t.start), class: uint8(class),
		read: r.Method == http.MethodGet, enqueue: enqueue})
	t.endpoints[endpoint]++
	t.mu.Unlock()
}

// joinsLine says r puts a contender in line: a KV acquire of its key, or a
// transaction that locks it (lockstep's join with writes of the caller's).
func joinsLine(r *http.Request) bool {
	if _, acquire := r.URL.Query()["acquire"]; acquire {
		return strings.Contains(r.URL.Path, "/slot/c/")
	}
	if r.URL.Path != "/v1/txn" {
		return false
	}
	return txnEndpoint(txnOps(r)) == "txn: join the line (and write waiting)"
}

// record starts keeping events, timed from start.
func (t *fleetTraffic) record(start time.Time) {
	t.mu.Lock()
	t.start, t.events, t.endpoints = start, nil, map[string]int64{}
	t.mu.Unlock()
	t.slowLive.Store(0)
	t.liveSince.Clear()
	for i := range t.bytes {
		t.bytes[i].Store(0)
	}
	t.recording.Store(true)
}

// stop ends recording and returns the events and the count by endpoint.
func (t *fleetTraffic) stop() ([]fleetEvent, map[string]int64) {
	t.recording.Store(false)
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.events, t.endpoints
}

// busy is the count of requests that are not periodic liveness.
func (t *fleetTraffic) busy() int64 { return t.total[fleetCoord].Load() + t.total[fleetSetup].Load() }

// waitQuiet waits until the fleet sent no request but liveness for quiet,
// polling, for at most limit.
func (t *fleetTraffic) waitQuiet(quiet, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	last, since := t.busy(), time.Now()
	for time.Now().Before(deadline) {
		time.Sleep(quiet / 10)
		if n := t.busy(); n != last {
			last, since = n, time.Now()
		} else if time.Since(since) >= quiet {
			return nil
		}
	}
	return fmt.Errorf("the fleet did not go quiet for %s within %s", quiet, limit)
}

// countingRT counts each request into the fleet's tally.
type countingRT struct {
	base http.RoundTripper
	t    *fleetTraffic
}

func (c countingRT) RoundTrip(r *http.Request) (*http.Response, error) {
	c.t.note(r)
	if !c.t.recording.Load() {
		return c.base.RoundTrip(r)
	}
	start := time.Now()
	live := fleetClassOf(r.URL.Path) == fleetLive
	if live {
		c.t.liveSince.Store(r, start)
	}
	resp, err := c.base.RoundTrip(r)
	if live {
		c.t.liveSince.Delete(r)
		c.t.noteLive(time.Since(start))
	}
	if err == nil {
		resp.Body = countingBody{resp.Body, &c.t.bytes[bytesKindOf(r.URL.Path)]}
	}
	return resp, err
}

// noteLive keeps d if it is the longest liveness request so far.
func (t *fleetTraffic) noteLive(d time.Duration) {
	for cur := t.slowLive.Load(); int64(d) > cur && !t.slowLive.CompareAndSwap(cur, int64(d)); cur = t.slowLive.Load() {
	}
}

// slowestLive is the longest liveness request since recording began,
// counting those still in flight as lasting until now, and how many are.
func (t *fleetTraffic) slowestLive() (time.Duration, int) {
	stuck := 0
	t.liveSince.Range(func(_, v any) bool {
		stuck++
		t.noteLive(time.Since(v.(time.Time)))
		return true
	})
	return time.Duration(t.slowLive.Load()), stuck
}

// fleetClient is one agent's own Consul client, as `rollagent run` makes
// it (agent.ConsulConfig: a pooled transport, uncompressed), with its
// requests counted into t, and its transport, for the caller to close
// idle connections on when the agent stops.
func fleetClient(addr string, t *fleetTraffic) (*api.Client, *http.Transport, error) {
	cfg := agent.ConsulConfig()
	cfg.Address, cfg.Scheme = addr, "http"
	cfg.HttpClient = &http.Client{Transport: countingRT{base: cfg.Transport, t: t}}
	c, err := api.NewClient(cfg)
	return c, cfg.Transport, err
}

// raftIndex is the leader's last raft log index: every raft write, from
// any client, moves it by one.
func raftIndex(c *api.Client) (uint64, error) {
	self, err := c.Agent().Self()
	if err != nil {
		return 0, err
	}
	raft, _ := self["Stats"]["raft"].(map[string]any)
	s, _ := raft["last_log_index"].(string)
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("agent/self has no raft last_log_index: %w", err)
	}
	return n, nil
}

// fleetCounts sums events by class and by read or write.
type fleetCounts struct {
	reads, writes [fleetClasses]int64
}

func (c fleetCounts) all() (n int64) {
	for i := range fleetClasses {
		n += c.reads[i] + c.writes[i]
	}
	return n
}

func countEvents(evs []fleetEvent) fleetCounts {
	var c fleetCounts
	for _, e := range evs {
		if e.read {
			c.reads[e.class]++
		} else {
			c.writes[e.class]++
		}
	}
	return c
}

// fleetSpan is the part of a rollout measured per release: from the last
// contender joining the line to the last release, when only handoffs
// happen; or, when fewer than 5 releases fall in that span (agents joined
// late), from the first grant, and whole says so.
type fleetSpan struct {
	from, to time.Duration
	releases int
	whole    bool
}

func lineSpan(evs []fleetEvent, turns []fleetTurn) fleetSpan {
	var joined time.Duration
	for _, e := range evs {
		if e.enqueue {
			joined = max(joined, e.at)
		}
	}
	first, last := fleetRolloutCap, time.Duration(0)
	for _, t := range turns {
		first, last = min(first, t.granted), max(last, t.released)
	}
	sp := fleetSpan{from: joined, to: last, releases: releasesAfter(turns, joined)}
	if sp.releases < 5 {
		sp.from, sp.whole = first, true
		sp.releases = releasesAfter(turns, first)
	}
	return sp
}

// perRelease is the span's time per release.
func (sp fleetSpan) perRelease() time.Duration {
	return (sp.to - sp.from) / time.Duration(max(sp.releases, 1))
}

// readsPerRelease is the reads sent per release in sp: near N would be a
// herd woken by every release, a small constant one waiter woken. A span
// from the first grant also counts each late joiner's own reads, a constant
// per node.
func readsPerRelease(evs []fleetEvent, sp fleetSpan) float64 {
	reads := 0
	for _, e := range evs {
		if e.read && e.at > sp.from && e.at <= sp.to {
			reads++
		}
	}
	return float64(reads) / float64(max(sp.releases, 1))
}

func releasesAfter(turns []fleetTurn, from time.Duration) (n int) {
	for _, t := range turns {
		if t.released > from {
			n++
		}
	}
	return n
}
