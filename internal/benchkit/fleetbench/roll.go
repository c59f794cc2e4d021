package fleetbench

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rollagent/rollagent/coordinator"
)

// fleetResult is one case's row.
type fleetResult struct {
	fleetCase
	wall, bound time.Duration
	// boundClient is the bound timed through a client agent, for the rows
	// whose agents reach the server through client agents, as on a fleet.
	boundClient time.Duration
	turns       int
	counts      fleetCounts
	raft        uint64
	perRelease  float64
	span        fleetSpan // what perRelease is measured over
	note        string
	// handoff is the median of release → next grant, hold of grant →
	// release: where a K=1 rollout's time goes.
	handoff, hold time.Duration
	// firstGrant is when the first slot was granted, after the commit:
	// the time every agent needs to notice the commit and line up.
	firstGrant time.Duration
	// kb is the JSON read per node, in KB, by bytesKindOf.
	kb [bytesKinds]float64
	// slowLive is the longest TTL check pass: the shared Consul agent
	// stalls its local endpoints while its anti-entropy syncs.
	slowLive time.Duration
	// liveStuck counts the liveness requests still in flight when the
	// case ended: slowLive counts them as lasting until then.
	liveStuck int
	// busyAgents and busyConsul are the cores this process (the agents)
	// and the Consul agents kept busy from the commit to the last turn:
	// their sum near GOMAXPROCS means the machine, not a wait, paced it.
	busyAgents, busyConsul float64
	// endpoints counts the requests by what they are for (endpointOf).
	endpoints map[string]int64
	// turnList is every successful turn, in grant order.
	turnList []fleetTurn
	// idle is the converged fleet watched after the rollout, with
	// FLEET_BENCH_IDLE; nil without.
	idle *idleResult
}

// turnTimes returns the median hold and, in grant order, the median time
// from one release to the next grant, which at K=1 is the handoff.
func turnTimes(turns []fleetTurn) (handoff, hold time.Duration) {
	slices.SortFunc(turns, func(a, b fleetTurn) int { return int(a.granted - b.granted) })
	var hs, ho []time.Duration
	for i, t := range turns {
		ho = append(ho, t.released-t.granted)
		if i > 0 {
			hs = append(hs, t.granted-turns[i-1].released)
		}
	}
	return median(hs), median(ho)
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// runFleetCase times the lower bound, brings up the fleet converged on v1,
// and rolls it to v2.
func runFleetCase(b *testing.B, cons fleetConsul, fc fleetCase, run int, opts Options) *fleetResult {
	f := newBenchFleet(b, cons, fc, run, opts)
	r := &fleetResult{fleetCase: fc}
	r.bound = casBound(b, cons.srv.Client(), "bench-fleet/"+f.group+"/bound", 3*fc.n)
	if len(cons.clients) > 0 {
		r.boundClient = casBound(b, cons.clients[0].Client(), "bench-fleet/"+f.group+"/bound-client", 3*fc.n)
	}
	v1 := f.commit("v1")
	f.startAgents(v1)
	defer f.stopAgents()
	f.converged(v1, 5*time.Minute)
	f.sessionsReady(5 * time.Minute)
	if err := f.traffic.waitQuiet(time.Second, 2*time.Minute); err != nil {
		b.Fatal(err)
	}
	f.roll(r)
	if window := idleWindow(b); window > 0 {
		f.idle(r, window)
	}
	return r
}

// newBenchFleet is the fleet of one case's run, its agents not started.
func newBenchFleet(b *testing.B, cons fleetConsul, fc fleetCase, run int, opts Options) *benchFleet {
	f := &benchFleet{b: b, opts: opts, fleetConsul: cons, fc: fc,
		group: fmt.Sprintf("fleet-%d-k%d-c%d-ttl%t-nm%t-t%d-h%d-r%d", fc.n, fc.k, fc.clients, fc.ttl, fc.noMirror,
			fc.replace.Milliseconds(), fc.healthy.Milliseconds(), run+1),
		store: coordinator.NewStore(cons.srv.Client(), ""), traffic: &fleetTraffic{}, turned: make(chan struct{}, 1),
		log: fleetLogger(b)}
	if fc.paced() {
		f.pace = &runtimePace{replace: fc.replace}
	}
	return f
}

// roll commits v2 and counts every request and raft write from the commit
// until every node has had its turn and the fleet is quiet again.
func (f *benchFleet) roll(r *fleetResult) {
	lead0, raft0 := f.raftAt()
	f.mu.Lock()
	f.start = time.Now()
	f.mu.Unlock()
	f.traffic.record(f.start)
	prof := profileConsul(f.b, f.profiled())
	stopProf := profileAgents(f.b)
	agents0, consul0 := f.fleetCPU()
	f.commit("v2")
	if err := f.awaitTurns(f.fc.n, fleetRolloutCap); err != nil {
		r.note = err.Error()
		f.b.Error(err)
	}
	stopProf()
	agents1, consul1 := f.fleetCPU()
	took := time.Since(f.start).Seconds()
	r.busyAgents, r.busyConsul = (agents1-agents0).Seconds()/took, (consul1-consul0).Seconds()/took
	if err := f.traffic.waitQuiet(time.Second, 2*time.Minute); err != nil {
		f.b.Error(err)
	}
	prof()
	evs, endpoints := f.traffic.stop()
	// The log is the cluster's: a new leader's last_log_index counts the
	// same writes, and its election's.
	lead1, raft1 := f.raftAt()
	if lead1 != lead0 {
		r.note = strings.TrimSpace(fmt.Sprintf("%s leader changed during the rollout (%s to %s).", r.note, lead0.Name, lead1.Name))
	}
	f.mu.Lock()
	turns, bad := slices.Clone(f.turns), slices.Clone(f.bad)
	f.mu.Unlock()
	if len(bad) > 0 {
		// Stopped by their fence (a lost session, say) and tried again: safe,
		// but worth seeing.
		r.note = strings.TrimSpace(fmt.Sprintf("%s %d turns did not succeed and were tried again: %v", r.note, len(bad), bad))
	}
	r.raft, r.endpoints = raft1-raft0, endpoints
	r.slowLive, r.liveStuck = f.traffic.slowestLive()
	for i := range r.kb {
		r.kb[i] = float64(f.traffic.bytes[i].Load()) / 1024 / float64(f.fc.n)
	}
	r.fill(turns, evs)
}

// fill derives the row's times and counts from the turns and requests.
func (r *fleetResult) fill(turns []fleetTurn, evs []fleetEvent) {
	r.firstGrant = fleetRolloutCap
	for _, t := range turns {
		r.wall = max(r.wall, t.released)
		r.firstGrant = min(r.firstGrant, t.granted)
	}
	r.turns, r.counts = len(turns), countEvents(evs)
	r.span = lineSpan(evs, turns)
	r.perRelease = readsPerRelease(evs, r.span)
	r.handoff, r.hold = turnTimes(turns)
	r.turnList = turns
}
