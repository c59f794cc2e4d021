package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/retry"
	"github.com/rollagent/rollagent/internal/watch"
	"github.com/rollagent/rollagent/lockstep"
)

// The check every nemesis commit blocks on (update.block_on), which the
// schedule flips between critical and passing (opCheckFail, opCheckPass).
// It is registered through the catalog on a node of its own, as
// consul-esm registers the checks of external nodes: no Consul agent owns
// it, so none of the nemesis' kills, reboots and partitions resets it,
// and each flip is one Raft write of the test's, whose index the check's
// ModifyIndex is.
const (
	gateNode  = "nemesis-gate"
	gateCheck = "nemesis-gate"
)

// gateBlocks is the block_on of every nemesis commit.
func gateBlocks() []hashspec.Block { return []hashspec.Block{{Check: gateCheck}} }

// flip is a change of the gate check's status as Consul applied it.
type flip struct {
	index    uint64 // the check's ModifyIndex
	critical bool
	at       time.Time // when the nemesis read it so, after the write returned
}

// grantSeen is a grant of a replacement slot, from Consul's KV: a
// contender key of the group's semaphore that says "holding" was written
// by the grant's transaction alone (lockstep's take), so its ModifyIndex
// is the grant's index. A reclaim writes none.
type grantSeen struct {
	group, node, session string
	index                uint64
	sha                  string    // from the grant's node record, or the node's claim
	at                   time.Time // when the watch saw it
}

// gateWatch records, from Consul, the gate check's flips and every grant
// of every group, and the node records the grants wrote, for invariant
// (f) (nemesis_gate_judge_test.go).
type gateWatch struct {
	c      *cluster
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	flips   []flip
	grants  map[string]*grantSeen            // group/session/index
	records map[string]coordinator.NodeState // group/node/ModifyIndex: the records seen
	// desired and canaries are the versions seen of each group's desired
	// record and canary records, by group (nemesis_order_test.go).
	desired  map[string]map[uint64]string
	canaries map[string]map[uint64]coordinator.Canaries
}

// registerGate puts the gate check in the catalog, passing, with an
// output of this run's own: the write changes the check whatever it was,
// so its index marks the run's start (nemesis.gateStart), from which the
// group's event log is judged (the log outlives a seed).
func (n *nemesis) registerGate() error {
	idx, err := n.setGate(false, fmt.Sprintf("nemesis seed %d from %s", n.seed, time.Now().Format(time.RFC3339Nano)))
	n.gateStart = idx
	return err
}

// flipGate sets the gate check's status for the schedule.
func (n *nemesis) flipGate(critical bool) error {
	_, err := n.setGate(critical, "")
	return err
}

// setGate writes the gate check's status through the catalog, retrying a
// few times (a leader kill may be under way), and records the flip at the
// index Consul shows for it, which it returns.
func (n *nemesis) setGate(critical bool, output string) (uint64, error) {
	status := api.HealthPassing
	if critical {
		status = api.HealthCritical
	}
	reg := &api.CatalogRegistration{Node: gateNode, Address: "127.0.0.1", SkipNodeUpdate: true,
		Check: &api.AgentCheck{Node: gateNode, CheckID: gateCheck, Name: gateCheck, Status: status, Output: output}}
	var err error
	for try := 0; try < 5; try++ {
		if _, err = n.c.api().Catalog().Register(reg, nil); err == nil {
			break
		}
		time.Sleep(time.Second)
	}
	if err != nil {
		return 0, fmt.Errorf("set the gate check %s: %w", status, err)
	}
	for try := 0; try < 5; try++ {
		var idx uint64
		if idx, err = n.readGate(critical); err == nil {
			n.note("gate check %s at index %d", status, idx)
			return idx, nil
		}
		time.Sleep(time.Second)
	}
	return 0, err
}

// readGate reads the gate check from Consul's health API, consistently,
// and records a flip when its status changed.
func (n *nemesis) readGate(critical bool) (uint64, error) {
	checks, _, err := n.c.api().Health().Node(gateNode, &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		return 0, err
	}
	for _, ch := range checks {
		if ch.CheckID != gateCheck {
			continue
		}
		if got := ch.Status == api.HealthCritical; got != critical {
			return 0, fmt.Errorf("the gate check reads %s", ch.Status)
		}
		n.gw.addFlip(flip{index: ch.ModifyIndex, critical: critical, at: time.Now()})
		return ch.ModifyIndex, nil
	}
	return 0, fmt.Errorf("the gate check is not in Consul's health API")
}

func (w *gateWatch) addFlip(f flip) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if k := len(w.flips); k == 0 || w.flips[k-1].critical != f.critical {
		w.flips = append(w.flips, f)
	}
}

// watchGate starts a watch of each group's semaphore and node records.
func (n *nemesis) watchGate() *gateWatch { return n.c.watchGrants(nemesisGroups()...) }

// watchGrants starts a watch of the semaphore and node records of groups.
func (c *cluster) watchGrants(groups ...string) *gateWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &gateWatch{c: c, cancel: cancel, grants: map[string]*grantSeen{}, records: map[string]coordinator.NodeState{},
		desired: map[string]map[uint64]string{}, canaries: map[string]map[uint64]coordinator.Canaries{}}
	for _, g := range groups {
		k, err := c.store().Keys(g)
		if err != nil {
			c.t.Fatal(err)
		}
		w.desired[g], w.canaries[g] = map[uint64]string{}, map[uint64]coordinator.Canaries{}
		w.wg.Add(4)
		go w.watch(ctx, k.Slot(), func(p api.KVPairs) { w.slotSeen(g, k.Slot(), p) })
		go w.watch(ctx, k.NodesPrefix(), func(p api.KVPairs) { w.nodesSeen(g, p) })
		go w.watch(ctx, k.Desired(), func(p api.KVPairs) { w.desiredSeen(g, k.Desired(), p) })
		go w.watch(ctx, k.Canaries(""), func(p api.KVPairs) { w.canariesSeen(g, p) })
	}
	return w
}

// stop ends the watches; it may be called twice.
func (w *gateWatch) stop() {
	w.cancel()
	w.wg.Wait()
}

// watch lists prefix at every change, with blocking queries, until ctx
// ends: a grant's contender key says "holding" for its whole hold (a step
// of a second or more), and its node record until the step's next record.
func (w *gateWatch) watch(ctx context.Context, prefix string, seen func(api.KVPairs)) {
	defer w.wg.Done()
	// A failed read (a partition, a killed server) is tried again 200ms
	// later from index 0; an index that went back (a new leader's
	// snapshot) starts over too (watch.Index).
	opts := watch.Options{Backoff: retry.NewSteady(200*time.Millisecond, 200*time.Millisecond), ResetOnError: true}
	watch.Run(ctx, opts, func(ctx context.Context, index uint64) (uint64, bool, error) {
		q := (&api.QueryOptions{WaitIndex: index, WaitTime: 10 * time.Second}).WithContext(ctx)
		pairs, meta, err := w.c.api().KV().List(prefix, q)
		if err != nil {
			return 0, false, err
		}
		seen(pairs)
		return meta.LastIndex, false, nil
	})
}

// slotSeen notes the grants a listing of the group's semaphore shows.
func (w *gateWatch) slotSeen(group, prefix string, pairs api.KVPairs) {
	for _, p := range pairs {
		// A contender key (<dir>/<node>/<session>), not a holder key:
		// a reclaim writes the holder key too.
		rel := strings.TrimPrefix(p.Key, prefix)
		parts := strings.Split(rel, "/")
		if lockstep.ClassifyKey(rel) != lockstep.KeyEntry || strings.HasPrefix(p.Key, lockstep.HoldersKey(prefix)) || len(parts) != 3 {
			continue
		}
		node, session := parts[1], parts[2]
		var e lockstep.Entry
		if json.Unmarshal(p.Value, &e) != nil || e.State != "holding" {
			continue
		}
		key := fmt.Sprintf("%s/%s/%d", group, session, p.ModifyIndex)
		w.mu.Lock()
		_, known := w.grants[key]
		if !known {
			w.grants[key] = &grantSeen{group: group, node: node, session: session, index: p.ModifyIndex, at: time.Now()}
		}
		w.mu.Unlock()
		if !known {
			w.claimSHA(group, prefix, key, node, session)
		}
	}
}

// claimSHA fills in a new grant's SHA from its node's claim, which the
// grant wrote (the grant's node record says it too; see sha).
func (w *gateWatch) claimSHA(group, prefix, key, node, session string) {
	h, err := lockstep.ReadHolders(w.c.api(), prefix, nil)
	if err != nil {
		return
	}
	c, ok := h.ClaimOf(node)
	if !ok || c.Session != session {
		return
	}
	sha, _, _ := strings.Cut(c.Note, "@")
	w.mu.Lock()
	w.grants[key].sha = sha
	w.mu.Unlock()
}

// nodesSeen keeps every node record a listing shows, by its index.
func (w *gateWatch) nodesSeen(group string, pairs api.KVPairs) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range pairs {
		var ns coordinator.NodeState
		if json.Unmarshal(p.Value, &ns) != nil {
			continue
		}
		w.records[fmt.Sprintf("%s/%s/%d", group, ns.Node, p.ModifyIndex)] = ns
	}
}

// record is the node record that the grant wrote, if the watch saw it:
// the grant's transaction wrote it at the grant's index.
func (w *gateWatch) record(g *grantSeen) (coordinator.NodeState, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ns, ok := w.records[fmt.Sprintf("%s/%s/%d", g.group, g.node, g.index)]
	return ns, ok
}
