package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/retry"
	"github.com/rollagent/rollagent/internal/watch"
	"github.com/rollagent/rollagent/lockstep"
)

const (
	// DefaultResync is how often an idle agent looks at its workload again
	// even when desired has not changed (each look is one blocking-query
	// renewal and a local inspect).
	DefaultResync = 5 * time.Minute
	// DefaultSessionTTL is the TTL of the check that keeps the agent's
	// lockstep session alive.
	DefaultSessionTTL = lockstep.DefaultCheckTTL
	// retryPause bounds the backoff after an error.
	retryPause = 10 * time.Second
	// retryMin is the first backoff after Consul could not be reached.
	retryMin = 250 * time.Millisecond
	// idleRetryMost bounds the pause between an idle node's tries at its
	// session.
	idleRetryMost = 5 * time.Minute
)

// Config configure an Agent.
type Config struct {
	Group string // required
	Node  string // required
	Store *coordinator.Store
	// Runtime replaces the workload. Required.
	Runtime Runtime
	// Allow is what specs may ask of this host.
	Allow Allow
	// SessionTTL of the lockstep session, within [MinSessionTTL,
	// MaxSessionTTL]. Optional, defaults to DefaultSessionTTL.
	SessionTTL time.Duration
	// Resync. Optional, defaults to DefaultResync.
	Resync time.Duration
	// Logger. Optional, defaults to a null logger.
	Logger hclog.Logger
	// Metrics. Optional.
	Metrics Metrics
	// HealthURL, when set, makes the service's workload check an HTTP
	// check that the Consul agent runs against this URL, which must be
	// served by HealthHandler. Optional: without it the agent passes a TTL
	// check itself every 10 s, which costs a request to Consul each time,
	// idle or not.
	HealthURL string
	// AliveURL, when set, binds the agent's lockstep session to an HTTP
	// check that the Consul agent runs against this URL, which must be
	// served by AliveHandler in this process, every SessionTTL/3, and that
	// goes critical after 3 failures in a row. The check is on an instance
	// of the service coordinator.AliveServiceName, and an alias check on
	// the group's service shows it (or, when the token may not register
	// that service, it is on the group's service). Its path must be this
	// process's own (a random token, say): another process that binds the
	// port of a killed agent must not answer for it. Such a session costs
	// nothing while idle, so the agent keeps one for as long as it runs: a
	// turn then costs no catalog write for the session's check and no
	// session of its own. Optional: without it, each rollout makes a session bound
	// to a TTL check that the agent passes every SessionTTL/3 while it
	// contends, and the session ends when the node converges.
	AliveURL string

	// The options below are no operator's to tune (`rollagent run` sets
	// none); tests set them through export_test.go.

	// settleTimeout bounds a release and a failure's record, each tried
	// again on a fresh context until it lands or this passes. Optional,
	// defaults to settleTimeout (a minute).
	settleTimeout time.Duration
	// leaseGrace is what a node's claim gets beyond the bounds of what one
	// hold runs, to undo, record and release. Optional, defaults to
	// leaseGrace (30 s).
	leaseGrace time.Duration
	// beforeLostMark, when set, is called as reportLost builds the
	// transaction that marks a node lost, after the read it decides on:
	// for a test that makes that node reclaim its slot just then.
	beforeLostMark func()
	// noStateMirror keeps the node's state out of its Consul service: the
	// service is registered once, and again only for the session's or the
	// alive check, not at each change of state, which saves a Consul agent
	// that carries many nodes' services (the fleet bench's) a catalog
	// write per change, at the cost of the state shown in the Consul UI.
	// Optional, defaults to mirroring.
	noStateMirror bool
}

// Agent converges one node of one group to the group's desired SHA.
type Agent struct {
	cfg  Config
	keys coordinator.Keys
	log  hclog.Logger
	pub  *publisher
	sess *lockstep.Session
	// consulRetry paces reads of the group while Consul is unreachable.
	consulRetry backoff
	// undoing is the SHA whose undo this process began and could not
	// finish (Look.Undoing), "" when none.
	undoing string
	// straysChecked says this process looked for drains of its node that
	// no record holds, and lifted them (liftStrays).
	straysChecked bool
	// drainTries paces a node's tries at a drain that the local Consul
	// agent refuses or fails (deferDrain); nil until the first.
	drainTries *retry.Backoff
	// idleTries paces an idle node's tries at its session (idleSession);
	// nil until the first failure.
	idleTries *retry.Backoff
	// unrecorded is a failure this process could not record yet.
	unrecorded *pendingFailure
	// problems is what was last logged of the group state's problems, so
	// that each distinct set is logged once, not on every look.
	problems string
	// health judges the workload, for its check and for each look: one
	// history, so that the node claims its slot when, and only when, its
	// check tells the others it is down.
	health HealthJudge
	// noConsulNode says the Consul agent's node name could not be read
	// yet, and that this was logged.
	noConsulNode bool
	// progressIn hands the group's state as the main loop read it to the
	// progress deadline's watcher (watchProgress).
	progressIn chan *coordinator.GroupState
}

// New checks cfg and returns an Agent.
func New(cfg Config) (*Agent, error) {
	if cfg.Store == nil || cfg.Runtime == nil {
		return nil, errors.New("agent: Store and Runtime are required")
	}
	if err := hashspec.ValidateName(cfg.Node); err != nil {
		return nil, fmt.Errorf("node: %w", err) // the error quotes the name, shortened
	}
	k, err := cfg.Store.Keys(cfg.Group)
	if err != nil {
		return nil, err
	}
	if cfg.SessionTTL == 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if err := CheckSessionTTL(cfg.SessionTTL); err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	if cfg.Resync <= 0 {
		cfg.Resync = DefaultResync
	}
	if cfg.settleTimeout <= 0 {
		cfg.settleTimeout = settleTimeout
	}
	if cfg.leaseGrace <= 0 {
		cfg.leaseGrace = leaseGrace
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = nopMetrics{}
	}
	log := cfg.Logger.With("group", cfg.Group, "node", cfg.Node)
	// The same DefaultDownAfter as HealthHandler's: the node's check and
	// its looks must call the workload down at the same moment.
	judge := judgeOf(cfg.Runtime, DefaultDownAfter)
	cfg.Store.WriteDownChecks(log)
	return &Agent{cfg: cfg, keys: k, log: log, pub: newPublisher(cfg, log, judge), health: judge,
		progressIn: make(chan *coordinator.GroupState, 1)}, nil
}

// learnConsulNode reads the local Consul agent's node name, until it has
// it, for the node's record (NodeState.ConsulNode): a host that goes down
// after a clean stop of its agent took the node's service out of the
// catalog is then still tied to the node, which counts as down.
func (a *Agent) learnConsulNode(ctx context.Context) {
	if a.pub.knowsConsulNode() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, stopTimeout)
	defer cancel()
	name, err := a.cfg.Store.ConsulNode(ctx)
	if err != nil || name == "" {
		if !a.noConsulNode {
			a.log.Warn("cannot read the Consul agent's node name (agent:read on it); the node's record goes without it, and tries again at each look", "error", err)
		}
		a.noConsulNode = true
		return
	}
	a.pub.learnt(name)
	a.noConsulNode = false
}

// learnDomain reads this node's topology domain under the desired spec's
// spread key (update.max_parallel_per) at each look, for the node's record
// (NodeState.Domain), before the node ever contends: a node that goes
// down and whose Consul node is then pruned from the catalog still counts
// in its zone. At each look, not once: a host moved to another zone while
// its agent runs (its Consul agent restarted with new meta) must not,
// once pruned, count in the old one; the record is written again when the
// domain differs. The read goes to the local Consul agent alone, once a
// look (an idle node looks every resync interval). A read that fails
// keeps what was read before and is tried at the next look; withDomain
// logs it when it matters.
func (a *Agent) learnDomain(ctx context.Context, gs *coordinator.GroupState) {
	if gs == nil || gs.Spec == nil || gs.Spec.Update.MaxParallelPer == nil {
		return
	}
	key := gs.Spec.Update.MaxParallelPer.Key
	ctx, cancel := context.WithTimeout(ctx, stopTimeout)
	defer cancel()
	if d, err := a.cfg.Store.LocalDomain(ctx, key); err == nil {
		a.pub.inDomain(d)
	}
}

// Run converges until ctx ends. A replacement under way when ctx ends is
// finished or undone first, each of its parts within its own bound; the
// node's claim keeps its slot for a next look if it cannot be released.
func (a *Agent) Run(ctx context.Context) error {
	a.log.Info("agent starting")
	a.pub.probeStopIndex(ctx)
	hctx, stopHealth := context.WithCancel(ctx)
	var wg sync.WaitGroup
	if a.cfg.HealthURL == "" {
		wg.Go(func() { a.pub.keepHealth(hctx) })
	} else {
		// Consul asks HealthHandler from now on; one reading here gives the
		// first registration the workload's health rather than critical.
		a.pub.readHealth(ctx)
	}
	wg.Go(func() { a.pub.mirror(hctx) })
	wg.Go(func() { a.watchProgress(hctx) })
	defer func() {
		// The mirror must be gone before the service is, or it could
		// register it again.
		stopHealth()
		wg.Wait()
		// With the mirror gone, the session's check goes with the service,
		// and the session with its check.
		if a.sess != nil {
			a.sess.Abandon()
			a.sess = nil
		}
		a.pub.markStopped()
		a.pub.deregister()
	}()
	var woke coordinator.Woken // desired as the wait for it saw it move
	for ctx.Err() == nil {
		gs, err := a.cfg.Store.ReadForAt(ctx, a.cfg.Group, a.cfg.Node, woke)
		woke = coordinator.Woken{}
		if err != nil {
			a.cfg.Metrics.ConsulError()
			a.logReadError(err)
			a.sleep(ctx, a.consulRetry.next())
			continue
		}
		a.consulRetry.reset()
		a.logProblems(gs.Problems)
		a.offerProgress(gs)
		retry := a.reconcile(ctx, gs)
		woke = a.waitDesired(ctx, gs.DesiredIndex(), retry)
	}
	a.log.Info("agent stopped")
	return nil
}

// logReadError logs a failure to read the group: an outage, which passes,
// as a warning; anything else (no right to read, a server that is not
// Consul) as an error, since it lasts until someone changes something.
func (a *Agent) logReadError(err error) {
	if coordinator.IsTransient(err) {
		a.log.Warn("cannot read group state", "error", err)
		return
	}
	a.log.Error("cannot read group state; retrying with backoff", "error", err)
}

// logProblems warns about records in the group's tree that do not decode:
// they are ignored, never acted on, and someone should look at them.
func (a *Agent) logProblems(problems []string) {
	joined := strings.Join(problems, "\n")
	if joined == a.problems {
		return
	}
	a.problems = joined
	if len(problems) > 0 {
		a.log.Warn("the group's state has problems; the records named are ignored", "problems", problems)
	}
}

// waitDesired blocks until desired moves off seen (its ModifyIndex, 0 for
// none), for at most the resync interval, or retry when that is shorter and
// not zero. It returns desired as it moved, for the next read to start
// from; nothing if it is gone or did not move.
func (a *Agent) waitDesired(ctx context.Context, seen uint64, retry time.Duration) coordinator.Woken {
	wait := a.cfg.Resync
	if retry > 0 && retry < wait {
		wait = retry
	}
	deadline := time.Now().Add(wait)
	// A workload that went down or came back is looked at again at once,
	// so that the node's record says so (decide: StateDown).
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-a.pub.downChanged:
			cancel()
		case <-ctx.Done():
		}
	}()
	var woke coordinator.Woken
	onError := func(err error, _ time.Duration) {
		a.cfg.Metrics.ConsulError()
		if !coordinator.IsTransient(err) && ctx.Err() == nil {
			// Not an outage that passes: a token that may not read
			// desired, or a server that is not Consul.
			a.log.Error("cannot wait for desired", "error", err)
		}
	}
	opts := watch.Options{From: seen, Until: deadline, Backoff: a.consulRetry.pace(), OnError: onError}
	watch.Run(ctx, opts, func(ctx context.Context, index uint64) (uint64, bool, error) {
		w, moved, last, err := a.cfg.Store.WaitDesired(ctx, a.cfg.Group, seen, index, time.Until(deadline))
		woke = w
		return last, moved, err
	})
	return woke
}

func (a *Agent) sleep(ctx context.Context, d time.Duration) { retry.Sleep(ctx, d) }

// jitter spreads a fleet's retries after a shared outage.
func jitter(d time.Duration) time.Duration { return retry.Jitter(d) }

// backoff is a jittered exponential backoff: a Consul away for a leader
// election is tried again within a fraction of a second, one down for
// longer at most every retryPause, and a fleet's retries spread out. The
// zero value is ready.
type backoff struct{ r *retry.Backoff }

// pace is the backoff itself: retryMin doubled per failure so far, up to
// retryPause, each pause drawn from its upper half.
func (b *backoff) pace() *retry.Backoff {
	if b.r == nil {
		b.r = retry.New(retryMin, retryPause)
	}
	return b.r
}

// next is the wait before the next try.
func (b *backoff) next() time.Duration { return b.pace().Next() }

// reset starts over after a success.
func (b *backoff) reset() { b.pace().Reset() }

// session returns the live session, or makes one. A new session's check
// goes into the service's registration as the node turns to waiting: one
// catalog write for both, where each is an O(services on the Consul node)
// write for Consul. The alive check (Config.AliveURL) stays registered, so
// its session is made once and kept.
func (a *Agent) session(ctx context.Context, waiting coordinator.NodeState) (*lockstep.Session, error) {
	if a.sess != nil {
		select {
		case <-a.sess.Done():
			a.closeSession()
		default:
			return a.sess, nil
		}
	}
	opts := lockstep.SessionOptions{Name: coordinator.ServiceID(a.cfg.Group, a.cfg.Node), TTL: a.cfg.SessionTTL,
		Logger: a.log.Named("lockstep")}
	var err error
	if a.cfg.AliveURL != "" {
		opts.CheckID, err = a.pub.withAlive(ctx, waiting)
		opts.ConsulRunsCheck = true
	} else {
		opts.CheckID, err = a.pub.withSession(ctx, waiting, a.cfg.SessionTTL)
	}
	if err != nil {
		return nil, fmt.Errorf("register the session's check: %w", err)
	}
	s, err := a.cfg.Store.NewSession(ctx, opts)
	if err != nil {
		if opts.ConsulRunsCheck {
			// The check may be gone with a Consul agent that lost its
			// state: register it again on the next try, not only when
			// the node's state next changes.
			a.pub.forget()
		} else {
			a.pub.dropSession(opts.CheckID)
		}
		return nil, err
	}
	a.sess = s
	return s, nil
}

// closeSession ends the session. A session on a TTL check ends with the
// removal of its check (publisher.dropSession), which Consul does in one
// Raft write with the session's end, rather than destroying it first; if
// that fails, it ends within its TTL all the same. The alive check stays,
// so a session on it has to be destroyed.
func (a *Agent) closeSession() {
	s := a.sess
	if s == nil {
		return
	}
	a.sess = nil
	if a.cfg.AliveURL == "" {
		s.Abandon()
		a.pub.dropSession(s.CheckID())
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		a.log.Warn("could not destroy a lost session; it ends when the agent stops", "error", err)
	}
}

// idleSession is for an agent with nothing to contend for, whose record
// says n. A session on a TTL check costs a pass every second, so it ends.
// One on the alive check costs nothing, so it is kept, or made now if there
// is none or it was lost: the next rollout then starts with no session and
// no check to create, and the registration that makes the check is the one
// that mirrors n. It returns how soon to try again, 0 when there is no
// need: a session that could not be made (a Consul agent busy with a
// fleet's start-up outlasts the bound) is tried again before the next
// rollout, which would otherwise make it in its own burst, and backs off,
// as the Consul agent may still be carrying the tries that ran out.
func (a *Agent) idleSession(ctx context.Context, n coordinator.NodeState) time.Duration {
	if a.cfg.AliveURL == "" {
		a.closeSession()
		return 0
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if a.idleTries == nil {
		a.idleTries = retry.New(retryPause, idleRetryMost)
	}
	if _, err := a.session(ctx, n); err != nil {
		a.log.Debug("no session made ahead of the next rollout; trying again later", "error", err)
		return a.idleTries.Next()
	}
	a.idleTries.Reset()
	return 0
}
