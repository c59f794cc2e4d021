package agent

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/wallclock"
	"github.com/rollagent/rollagent/lockstep"
)

// serviceCheckTTL is the TTL of the workload health check in the Consul UI;
// it is passed every third of that.
const serviceCheckTTL = 30 * time.Second

// publisher writes this node's state to KV and mirrors it into a Consul
// service (tags and meta) so that the Consul UI shows each node's SHA and
// state, with a TTL check that follows the workload's health.
type publisher struct {
	store *coordinator.Store
	group string
	node  string
	log   hclog.Logger
	judge HealthJudge // for a fresh health reading when the service is re-registered
	// healthURL makes the workload check an HTTP check Consul runs, when
	// set, instead of a TTL check that keepHealth passes.
	healthURL string
	// aliveURL, when set, adds the alive check (Config.AliveURL), run by
	// Consul every aliveEvery, to the service, as aliveID (see register).
	aliveURL   string
	aliveEvery time.Duration
	// aliveID is this process's own: an agent restarted after a kill
	// registers its service anew, which replaces the old process's check
	// and so ends its session at once. Under one ID, the new process's
	// answers would keep the dead one's session, and its slot, alive.
	aliveID string
	// noMirror registers the service once, and again only for the
	// session's or the alive check (Config.NoStateMirror).
	noMirror bool
	// changed is a buffered(1) signal to mirror: sends never block.
	changed chan struct{}
	// downChanged is a buffered(1) signal to the agent's loop that the
	// workload went down or came back, so that its record says so.
	downChanged chan struct{}

	mu     sync.Mutex
	last   coordinator.NodeState
	stale  bool   // KV holds something else than last: write it again
	health string // api.HealthPassing, api.HealthWarning or api.HealthCritical
	// consulNode is the local Consul agent's node name, "" until learnt:
	// every record carries it (NodeState.ConsulNode).
	consulNode string
	// imageID is the image the workload ran at the runtime's last
	// inspection (observe): every record carries it.
	imageID string

	// regMu orders registrations, so that one made without the session's
	// check never lands after one made with it while the session lives.
	regMu      sync.Mutex
	session    sessionCheck // the live session's check, if any
	registered string       // what the last registration said, to skip a repeat
	// aliveOn says a registration that listed the alive check has landed
	// since the last forget. Later ones leave it out, and so leave it
	// running: Consul restarts a check that a registration lists, and arms
	// the restarted one to go critical at its first failed run.
	aliveOn bool
}

// sessionCheck is the TTL check a lockstep session is bound to. It is
// registered with the service, so that one catalog write carries both the
// node's "waiting" and its session's check.
type sessionCheck struct {
	id  string
	ttl time.Duration
}

func (p *publisher) serviceID() string { return coordinator.ServiceID(p.group, p.node) }
func (p *publisher) checkID() string   { return coordinator.WorkloadCheckID(p.group, p.node) }

// state builds this node's NodeState, keeping the previous Since when
// nothing changed, so that "since" means since the last change.
func (p *publisher) state(sha, desired string, state coordinator.NodeStatus, errText string) coordinator.NodeState {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := coordinator.NodeState{Node: p.node, SHA: sha, Desired: desired, State: state, Error: errText, Since: wallclock.Now().UTC(),
		ConsulNode: p.consulNode, ImageID: p.imageID}
	if coordinator.SamePublished(p.last, n) {
		n.Since = p.last.Since
	}
	return n
}

// observe notes what the runtime's inspection found, for the records
// built from then on.
func (p *publisher) observe(obs Observed) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.imageID = obs.ImageID
}

// current is what was published last.
func (p *publisher) current() coordinator.NodeState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last
}

// sync marks what was published last as stale when gs shows another
// record for this node (overwritten, truncated or deleted by someone else),
// so that the next set writes it again.
func (p *publisher) sync(gs *coordinator.GroupState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stale = p.last.State != ""
	for _, n := range gs.Nodes {
		if n.Node == p.node && coordinator.SamePublished(n, p.last) {
			p.stale = false
		}
	}
}

// differs says whether n needs writing: it is not what was published last,
// or that record is gone from KV.
func (p *publisher) differs(n coordinator.NodeState) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stale || !coordinator.SamePublished(p.last, n)
}

// publishTimeout bounds one write of the node's record.
const publishTimeout = 30 * time.Second

// set publishes n if it differs from what was published last.
func (p *publisher) set(ctx context.Context, n coordinator.NodeState) {
	if !p.differs(n) {
		return
	}
	// Bounded: a Consul client agent cut off from its servers may hold a
	// write for minutes, and a turn that is undoing a step must not wait
	// on its record; a record not written is written at the next look.
	ctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	if err := p.store.PutNode(ctx, p.group, n); err != nil {
		p.log.Warn("could not publish node state", "state", n.State, "error", err)
		return
	}
	p.published(ctx, n)
}

// published records n as written (by set or inside a fence) and asks for
// the service to be updated. It does not wait for that: a Consul client cut
// off from its servers holds its local state lock while it tries to sync,
// and a replacement must not wait on the UI.
func (p *publisher) published(_ context.Context, n coordinator.NodeState) {
	p.mu.Lock()
	p.last, p.stale = n, false
	p.mu.Unlock()
	p.log.Info("node state", "state", n.State, "sha", coordinator.ShortSHA(n.SHA), "desired", coordinator.ShortSHA(n.Desired), "error", n.Error)
	p.signal()
}

// signal asks mirror for a registration, without waiting.
func (p *publisher) signal() {
	select {
	case p.changed <- struct{}{}:
	default: // an update is already pending; it will take the latest state
	}
}

// mirrorSettle lets a burst of state changes reach the Consul service as
// one registration: replacing, verifying and converged can come within
// milliseconds, and each registration is a catalog write for Consul, made
// while the next node takes its turn. The UI lags by as much.
const mirrorSettle = 500 * time.Millisecond

// mirror re-registers the service with the latest state, once per burst of
// signals, until ctx ends. A registration that fails is tried again with
// backoff: nothing else may come to signal it, and until it lands the UI
// shows an old state, and a dropped session's check stays on the service.
func (p *publisher) mirror(ctx context.Context) {
	var retry backoff
	var again <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.changed:
		case <-again:
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(mirrorSettle):
		}
		select {
		case <-p.changed: // came while settling: this registration covers it
		default:
		}
		again = nil
		if err := p.mirrorOnce(ctx); err != nil && ctx.Err() == nil {
			d := retry.next()
			p.log.Warn("could not update the consul service; trying again", "in", d, "error", err)
			again = time.After(d)
			continue
		}
		retry.reset()
	}
}

// mirrorOnce registers the service with the latest state. Re-registering
// resets the workload check to the status given, so it reads the
// workload's health now, not the last periodic reading.
func (p *publisher) mirrorOnce(ctx context.Context) error {
	health, _ := p.readHealth(ctx)
	p.mu.Lock()
	n := p.last
	p.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	p.regMu.Lock()
	defer p.regMu.Unlock()
	return p.register(rctx, n, health)
}

// register registers the service with n, and the session's check while
// there is one, unless the last registration said the same. Callers hold
// regMu.
//
// A registration that lists the alive check replaces the service's checks:
// that drops the checks a killed predecessor left on the service (its
// session's then ends at once), which would stay critical there for good.
// It is made once, and again after forget; the others leave the alive
// check out, and so keep the checks they do not list, or a live holder
// would lose its session to a single failed run after each change of state.
// Without the alive check, every registration replaces the checks: the
// session's check goes by being left out (dropSession).
func (p *publisher) register(ctx context.Context, n coordinator.NodeState, health string) error {
	reg := &api.AgentServiceRegistration{
		ID: p.serviceID(), Name: coordinator.ServiceName(p.group),
		Tags:   []string{"sha:" + coordinator.ShortSHA(n.SHA), "state:" + string(n.State), "desired:" + coordinator.ShortSHA(n.Desired)},
		Meta:   map[string]string{"group": p.group, "node": p.node, "sha": n.SHA, "desired": n.Desired, "state": string(n.State)},
		Checks: api.AgentServiceChecks{p.workloadCheck(health)},
	}
	listAlive := p.aliveURL != "" && !p.aliveOn
	if listAlive {
		reg.Checks = append(reg.Checks, p.aliveCheck())
	}
	if p.session.id != "" {
		reg.Checks = append(reg.Checks, &api.AgentServiceCheck{CheckID: p.session.id, Name: "rollagent session",
			TTL: p.session.ttl.String(), Status: api.HealthPassing, Notes: lockstep.CheckNotes})
	}
	said := fmt.Sprint(reg.Tags, reg.Meta, health, p.session)
	if p.noMirror {
		said = fmt.Sprint(p.session)
	}
	if said == p.registered && !listAlive {
		return nil // each registration is a catalog write
	}
	replace := p.aliveURL == "" || listAlive
	if err := p.store.RegisterService(ctx, reg, replace); err != nil {
		p.registered = ""
		return err
	}
	p.registered = said
	p.aliveOn = p.aliveOn || listAlive
	return nil
}

// workloadCheck is the service's check of the workload's health, starting
// at health: Consul resets a check to the status registered with it.
func (p *publisher) workloadCheck(health string) *api.AgentServiceCheck {
	c := &api.AgentServiceCheck{CheckID: p.checkID(), Name: "workload health", Status: health,
		Notes: "passing while the managed workload is healthy"}
	if p.healthURL == "" {
		c.TTL = serviceCheckTTL.String()
		return c
	}
	c.HTTP, c.Method = p.healthURL, http.MethodGet
	c.Interval, c.Timeout = healthCheckInterval.String(), healthCheckTimeout.String()
	c.Notes += "; asked of the rollagent agent, so it fails while the agent is down"
	return c
}

// aliveFailures is how many of the alive check's runs in a row must fail
// before Consul marks it critical, which ends the session: as long as a
// TTL check gives, so one slow answer does not cost a holder its slot.
// Consul arms a check it has just registered to change its status at its
// first run, so the alive check is registered once (see register): only
// that first run, within one interval of the agent's start (or of a Consul
// agent that lost the check), can end the session alone.
const aliveFailures = 3

// aliveCheck is the check a long-lived session is bound to. It asks
// nothing of the workload: only whether this process answers.
func (p *publisher) aliveCheck() *api.AgentServiceCheck {
	return &api.AgentServiceCheck{CheckID: p.aliveID, Name: "rollagent alive", Status: api.HealthPassing,
		HTTP: p.aliveURL, Method: http.MethodGet, Interval: p.aliveEvery.String(), Timeout: p.aliveEvery.String(),
		FailuresBeforeCritical: aliveFailures, Notes: lockstep.AliveNotes}
}

// withAlive registers the service as n, with the alive check, unless a
// registration with it has landed already, and returns the check's ID.
// Consul has the check in its catalog when this returns, so a session may
// name it.
func (p *publisher) withAlive(ctx context.Context, n coordinator.NodeState) (string, error) {
	p.regMu.Lock()
	defer p.regMu.Unlock()
	if p.aliveOn {
		return p.aliveID, nil
	}
	p.mu.Lock()
	health := cmp.Or(p.health, healthNotRead)
	p.mu.Unlock()
	if err := p.register(ctx, n, health); err != nil {
		return "", err
	}
	return p.aliveID, nil
}

// forget makes the next registration go ahead even if it says the same as
// the last one, and list the alive check again: it may be gone with a
// Consul agent that lost its state.
func (p *publisher) forget() {
	p.regMu.Lock()
	defer p.regMu.Unlock()
	p.registered, p.aliveOn = "", false
}

// withSession registers the service as n together with a new TTL check for
// a session to be bound to, and returns the check's ID. Consul has the
// check in its catalog when this returns, so a session may name it.
func (p *publisher) withSession(ctx context.Context, n coordinator.NodeState, ttl time.Duration) (string, error) {
	p.regMu.Lock()
	defer p.regMu.Unlock()
	p.mu.Lock()
	health := cmp.Or(p.health, healthNotRead)
	p.mu.Unlock()
	p.session = sessionCheck{id: lockstep.NewCheckID(p.serviceID()), ttl: ttl}
	if err := p.register(ctx, n, health); err != nil {
		p.session = sessionCheck{}
		return "", err
	}
	return p.session.id, nil
}

// dropSession ends the session whose check is id, by removing the check,
// which makes Consul invalidate the session in that same write. The
// removal rides on the mirror's next registration, which replaces the
// service's checks with those it lists: after a turn, the one that mirrors
// "converged", so one request to the Consul agent does both. The delay (the
// mirror's settle) holds nothing up: Release has deleted the session's
// keys, and nobody passes its check any more (Session.Abandon), so it ends
// within its TTL even if Consul cannot be reached. When the mirror has
// stopped, the service's deregistration removes the check.
func (p *publisher) dropSession(id string) {
	p.regMu.Lock()
	defer p.regMu.Unlock()
	if p.session.id == id {
		p.session = sessionCheck{}
	}
	p.registered = "" // register even if nothing else changed, to drop the check
	p.signal()
}

// readHealth asks the runtime for the workload's health, notes it for the
// next registration, and returns it as a check status with the reason:
// critical only when the workload is down by a sustained signal
// (HealthJudge), warning while it is failing short of that.
func (p *publisher) readHealth(ctx context.Context) (status, why string) {
	h, why := p.judge.Health(ctx)
	status = checkStatus[h]
	p.mu.Lock()
	was := p.health
	p.health = status
	p.mu.Unlock()
	if was != "" && (was == api.HealthCritical) != (status == api.HealthCritical) {
		select {
		case p.downChanged <- struct{}{}:
		default:
		}
	}
	return status, why
}

// healthNotRead is the workload check's status when it is registered
// before any reading: warning, which does not count the node down, until
// the first reading, made at once, says.
const healthNotRead = api.HealthWarning

// checkStatus is the workload check's status for each Health.
var checkStatus = map[Health]string{HealthUp: api.HealthPassing, HealthFailing: api.HealthWarning, HealthDown: api.HealthCritical}

// keepHealth passes or fails the service's TTL check from the runtime's
// view of the workload until ctx ends.
func (p *publisher) keepHealth(ctx context.Context) {
	tick := time.NewTicker(serviceCheckTTL / 3)
	defer tick.Stop()
	for {
		status, why := p.readHealth(ctx)
		if err := p.store.UpdateTTL(ctx, p.checkID(), why, status); err != nil && ctx.Err() == nil {
			p.log.Debug("could not update the workload check", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// stopTimeout bounds the last write of a stopping agent: a service
// manager waits on it, and a Consul that does not answer must not hold the
// stop for long.
const stopTimeout = 5 * time.Second

// markStopped marks this node's record with the time of this clean stop,
// before the service leaves the catalog: status's grace before it calls a
// node gone from the catalog lost runs from it, not from the node's last
// change, which may be days old on an idle node. Only a record that is
// still what this agent published is marked (Store.MarkStopped).
func (p *publisher) markStopped() {
	p.mu.Lock()
	n, stale := p.last, p.stale
	p.mu.Unlock()
	if n.State == "" || stale {
		return // nothing published, or KV holds something else: leave it
	}
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	marked, err := p.store.MarkStopped(ctx, p.group, n, wallclock.Now())
	switch {
	case err != nil:
		p.log.Warn("could not record this clean stop in the node's record", "error", err)
	case !marked:
		p.log.Info("node record changed since it was published; this clean stop is not marked in it")
	}
}

// deregister removes the service when the agent stops.
func (p *publisher) deregister() {
	if err := p.store.DeregisterService(p.serviceID()); err != nil {
		p.log.Debug("could not deregister the service", "error", err)
	}
}
