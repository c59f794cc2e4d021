package agentbench

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rollagent/rollagent/internal/benchkit"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/fleettest"
)

const (
	failoverAgents = 10
	failoverTries  = 10
	// failoverHookSleep is how long a replacement takes: long enough that
	// the holder is still in its step when it is killed.
	failoverHookSleep = 4 * time.Second
	// failoverTryCap bounds the wait for the next node to start.
	failoverTryCap = 90 * time.Second
)

// failoverKind is what dies: the holder's agent process, or its whole node
// (the Consul client agent the node's rollagent talks to, and the agent),
// on a cluster whose every agent runs with gossip as its extra
// configuration (empty: Consul's defaults).
type failoverKind struct {
	name     string
	slug     string // in its group's name
	nodeDies bool
	gossip   string
	// downFor is how long what was killed stays dead: 0 for an agent that
	// systemd restarts at once. The slot belongs to the node, so no other
	// node may begin before it is back.
	downFor time.Duration
	// neverBack: what was killed stays down until the node is recorded
	// lost, which is what the try times, and only then comes back.
	neverBack bool
	// killAt is how far into the step the first try kills; each try
	// after kills killStep later. 0: 0.5 s, in the middle of the hook,
	// and 100 ms.
	killAt, killStep time.Duration
	tries            int
	note             string
}

// failoverHookTimeout is the never-back kind's --hook-timeout: its lease is
// that + twice healthy_deadline (30 s) + the exec runtime's prepare bound
// (10 s) + 30 s, where the default would be 12 min.
const failoverHookTimeout = 10 * time.Second

var failoverKinds = []failoverKind{
	{name: "agent-killed mid-hook, back at once", slug: "agent-mid-hook", tries: failoverTries,
		note: "agent and its hook SIGKILLed 0.5-1.4 s into the hook and restarted at once, as systemd would: the new agent reclaims its node's slot, finds the install cut off, undoes it and replaces again, and releases"},
	{name: "agent-killed with its workload healthy, back at once", slug: "agent-healthy", killAt: failoverHookSleep + 50*time.Millisecond, killStep: 50 * time.Millisecond, tries: failoverTries,
		note: "agent SIGKILLed after its hook installed the release, while it verifies it (min_healthy_time 1s), and restarted at once: the new agent reclaims its node's slot, verifies the healthy workload for min_healthy_time and releases"},
	{name: "node-killed, back after 15 s", slug: "node-back", nodeDies: true, downFor: 15 * time.Second, tries: failoverTries,
		note: "the node's Consul client agent SIGKILLed with the agent, both back 15 s later: no other node may begin before then"},
	{name: "node-killed, never back", slug: "node-never-back", nodeDies: true, neverBack: true, tries: 3,
		note: "measured to the node's failure record (`<node> lost while replacing`), which the head of the line writes once the claim's lease runs out (--hook-timeout 10s + 2 x healthy_deadline 30s + prepare bound 10s + 30 s = 110 s, timed by the head of the line from when it sees the node's session gone); failure_action (pause, max_failures=1) applies in that write. No other node begins meanwhile: the dead node still counts against K until it is back or leaves the group"},
}

// lease is the claim lease of k's agents.
func (k failoverKind) lease() time.Duration {
	return failoverHookTimeout + 2*30*time.Second + 10*time.Second + 30*time.Second
}

// flags are the extra `run` flags of k's agents.
func (k failoverKind) flags() []string {
	if k.neverBack {
		return []string{"--hook-timeout=" + failoverHookTimeout.String()}
	}
	return nil
}

// failoverCluster is one server and a client agent per node.
type failoverCluster struct {
	srv     *consultest.Server
	clients []*consultest.Server
}

// failoverRow is one kind's tries.
type failoverRow struct {
	kind     failoverKind
	tries    []time.Duration // kill -> the next node's hook begins
	freed    []time.Duration // kill -> the holder's slot is free in KV (Consul's part)
	timeouts int
}

// failoverTimes is one try: the kill to the slot being free (the holder's
// contender key gone with its session, which is Consul's part) and to the
// next node's hook beginning (which adds the agents' part).
type failoverTimes struct{ freed, next time.Duration }

// Failover runs 10 agents, each on its own Consul client agent
// joined to one server, rolls out at max_parallel=1 with replacements of
// failoverHookSleep, and SIGKILLs the slot holder in the middle of its
// step: failoverTries times per kind, it times the kill to the next node's
// replace hook beginning.
func Failover(b *testing.B) {
	clusters := map[string]failoverCluster{}
	var rows []*failoverRow
	for _, k := range failoverKinds {
		c, ok := clusters[k.gossip]
		if !ok {
			// A server, not a -dev agent: -dev gossips ten times faster than
			// a production agent and would find a dead node unrealistically
			// soon.
			c.srv = consultest.New(b, consultest.Options{Persistent: true, HCL: k.gossip})
			c.clients = consultest.NewClients(b, c.srv, failoverAgents, k.gossip)
			clusters[k.gossip] = c
		}
		b.Run(k.name, func(b *testing.B) {
			r := failoverRun(b, c.srv, c.clients, k)
			med, _, hi := benchkit.DurStats(r.tries)
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(med.Seconds(), "failover-p50-s")
			b.ReportMetric(hi.Seconds(), "failover-max-s")
			b.ReportMetric(float64(r.timeouts), "timeouts")
			rows = append(rows, r)
		})
	}
	publish(b, "failover", failoverMarkdown(rows))
}

// failoverRun runs k's tries on a group of its own: its agents start on
// the cluster's client agents and first install v0 everywhere.
func failoverRun(b *testing.B, srv *consultest.Server, clients []*consultest.Server, k failoverKind) *failoverRow {
	ba := newAgents(b, srv.Client(), "failover-"+k.slug, failoverHookSleep)
	ns := nodes(failoverAgents)
	client := map[string]*consultest.Server{}
	for i, n := range ns {
		client[n] = clients[i]
		ba.start(n, clients[i].HTTPAddr, k.flags()...)
	}
	v0 := ba.commit("v0", failoverAgents)
	fleettest.WaitFor(b, 2*time.Minute, "first install on every node", func() bool { return ba.converged(ns, v0) })
	r := &failoverRow{kind: k}
	for i := range k.tries {
		// Each try kills a little later into the step: across the
		// holder's 1 s TTL-pass cycle rather than always at one point.
		try := failoverTry
		if k.neverBack {
			try = failoverLostTry
		}
		at, step := k.killAt, k.killStep
		if at == 0 {
			at, step = 500*time.Millisecond, 100*time.Millisecond
		}
		d, err := try(ba, ns, client, k, fmt.Sprintf("v%d", i+1), at+time.Duration(i)*step)
		switch {
		case errors.Is(err, errFailoverTimeout):
			r.timeouts++
		case err != nil:
			b.Fatalf("try %d: %v", i, err)
		default:
			r.tries, r.freed = append(r.tries, d.next), append(r.freed, d.freed)
		}
		b.Logf("%s try %d: slot free after %s, next node began after %s", k.name, i,
			d.freed.Round(time.Millisecond), d.next.Round(time.Millisecond))
	}
	return r
}

var errFailoverTimeout = fmt.Errorf("no node started within %s of the kill", failoverTryCap)

// failoverTry commits release at max_parallel=1, waits for the first node
// to begin its replacement, kills it phase later and times the kill to the
// slot being free and to the next node's begin; then it brings the killed
// node back.
func failoverTry(ba *agents, ns []string, client map[string]*consultest.Server, k failoverKind, release string, phase time.Duration) (failoverTimes, error) {
	var ft failoverTimes
	sha, first, killed, err := failoverKill(ba, ns, client, k, release, phase)
	if err != nil {
		return ft, err
	}
	var next hookBegin
	var revived time.Time
	var reviveErr error
	ok := benchkit.Poll(failoverTryCap, func() bool {
		if revived.IsZero() && time.Since(killed) >= k.downFor {
			revived, reviveErr = time.Now(), failoverRevive(ba, client, k, first.node)
		}
		if ft.freed == 0 && !ba.holds(first.node) {
			ft.freed = time.Since(killed)
		}
		for _, hb := range ba.beginsOf(ns, sha) {
			if hb.node != first.node {
				next = hb
				return true
			}
		}
		return reviveErr != nil
	})
	if revived.IsZero() {
		reviveErr = failoverRevive(ba, client, k, first.node)
	}
	switch {
	case reviveErr != nil:
		return ft, reviveErr
	case !ok:
		return ft, errFailoverTimeout
	case next.at.Before(killed):
		return ft, fmt.Errorf("%s began %.12s %s before its holder %s was killed: two nodes held a slot at K=1",
			next.node, sha, killed.Sub(next.at), first.node)
	case k.downFor > 0 && next.at.Before(revived):
		return ft, fmt.Errorf("%s began %.12s while its killed holder %s was still down: two nodes down at K=1",
			next.node, sha, first.node)
	}
	ft.next = next.at.Sub(killed)
	ft.freed = min(ft.freed, ft.next) // polled, so it can only be late
	return ft, nil
}

// failoverLostTry is failoverTry for a node that never comes back: it
// times the kill to the node's failure record, checks that the record
// waited for the claim's lease and that no other node began meanwhile,
// and only then brings the node back.
func failoverLostTry(ba *agents, ns []string, client map[string]*consultest.Server, k failoverKind, release string, phase time.Duration) (failoverTimes, error) {
	var ft failoverTimes
	sha, first, killed, err := failoverKill(ba, ns, client, k, release, phase)
	if err != nil {
		return ft, err
	}
	var lost time.Time
	ok := benchkit.Poll(k.lease()+time.Minute, func() bool {
		if gs := ba.state(); gs != nil {
			for _, f := range gs.Failures {
				if f.Node == first.node && f.SHA == sha {
					lost = time.Now()
				}
			}
		}
		return !lost.IsZero()
	})
	others := 0
	for _, hb := range ba.beginsOf(ns, sha) {
		if hb.node != first.node {
			others++
		}
	}
	if err := failoverRevive(ba, client, k, first.node); err != nil {
		return ft, err
	}
	switch {
	case !ok:
		return ft, fmt.Errorf("%s not recorded lost within %s of its kill", first.node, k.lease()+time.Minute)
	case lost.Before(first.at.Add(k.lease() - 2*time.Second)):
		return ft, fmt.Errorf("%s recorded lost %s after its step began, before its lease %s ran out", first.node, lost.Sub(first.at), k.lease())
	case others > 0:
		return ft, fmt.Errorf("%d other node(s) began %.12s while %s was dead: two nodes down at K=1", others, sha, first.node)
	}
	ft.next, ft.freed = lost.Sub(killed), lost.Sub(killed)
	return ft, nil
}

// failoverKill commits release at max_parallel=1, waits for the first
// node to begin replacing, and kills it (with its Consul client when the
// node dies) phase into its step.
func failoverKill(ba *agents, ns []string, client map[string]*consultest.Server, k failoverKind, release string, phase time.Duration) (sha string, first hookBegin, killed time.Time, err error) {
	sha = ba.commit(release, 1)
	if !benchkit.Poll(2*time.Minute, func() bool {
		bs := ba.beginsOf(ns, sha)
		if len(bs) > 0 {
			first = bs[0]
		}
		return len(bs) > 0
	}) {
		return sha, first, killed, fmt.Errorf("no node began %.12s within 2m of its commit", sha)
	}
	time.Sleep(time.Until(first.at.Add(phase)))
	killed = time.Now()
	if k.nodeDies {
		client[first.node].Kill()
	}
	ba.kill(first.node)
	return sha, first, killed, nil
}

// failoverRevive restarts what the try killed.
func failoverRevive(ba *agents, client map[string]*consultest.Server, k failoverKind, node string) error {
	if k.nodeDies {
		if err := client[node].Restart(); err != nil {
			return fmt.Errorf("restart the Consul client of %s: %w", node, err)
		}
	}
	ba.start(node, client[node].HTTPAddr, k.flags()...)
	return nil
}

func failoverMarkdown(rows []*failoverRow) string {
	var sb strings.Builder
	sb.WriteString(header("BenchmarkAgentFailover"))
	fmt.Fprintf(&sb, "%d `rollagent run` processes (exec runtime), each on its own Consul client agent joined to one "+
		"server (not -dev; Consul's default gossip settings unless the row says otherwise); max_parallel=1, each replacement's hook takes %s; the holder is killed where the row says. "+
		"Measured: kill → the next node's replace hook begins; for a node never back, kill → its failure record. "+
		"The slot belongs to the node, so the next node begins only once the killed one is back; one never back is recorded "+
		"lost once the head of the line has seen its session gone for its claim's lease (the runtime's step bound + 2 x healthy_deadline + its pull's bound + 30 s: 13 min by default with Docker, "+
		"110 s here with --hook-timeout=10s), and counts against K while it is down.\n\n", failoverAgents, failoverHookSleep)
	sb.WriteString("| What is killed | Tries | Median (s) | Min (s) | Max (s) | Timeouts | Target | " +
		"Slot free, median (s) | Slot free → next begins, median (ms) | Note |\n")
	sb.WriteString("|---|---:|---:|---:|---:|---:|---|---:|---:|---|\n")
	for _, r := range rows {
		med, lo, hi := benchkit.DurStats(r.tries)
		freed, _, _ := benchkit.DurStats(r.freed)
		var handoff []time.Duration
		for i := range r.tries {
			handoff = append(handoff, r.tries[i]-r.freed[i])
		}
		hmed, _, _ := benchkit.DurStats(handoff)
		target := "≤ 5 s after it is back"
		if r.kind.neverBack {
			target = fmt.Sprintf("its lease, %s after its session is seen gone", r.kind.lease())
		}
		fmt.Fprintf(&sb, "| %s | %d | %.2f | %.2f | %.2f | %d | %s | %.2f | %.0f | %s |\n", r.kind.name,
			len(r.tries)+r.timeouts, med.Seconds(), lo.Seconds(), hi.Seconds(), r.timeouts, target, freed.Seconds(),
			benchkit.Ms(hmed), r.kind.note)
	}
	sb.WriteString("\n\"Slot free\" is polled every 10 ms from KV: the holder's contender key gone with its session, " +
		"which is Consul's part (TTL check lapsing, or gossip declaring the node dead); the rest is the agents' handoff, " +
		"an upper bound of the poll's resolution.\n")
	sb.WriteString("\nFor context: issue 9 measured `consul lock -n 1` at 42.9 s after a SIGKILLed holder " +
		"(15 s session TTL, up to 2× that, plus a 15 s lock-delay); lockstep's own benchmark measures the CLI in the same run as lockstep.\n")
	return sb.String()
}
