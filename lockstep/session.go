package lockstep

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"
)

const (
	// DefaultSessionName names sessions in the Consul UI.
	DefaultSessionName = "rollagent"
	// DefaultCheckTTL is the TTL of the check a Session keeps passing. A
	// killed process loses its session about this long after its last pass.
	DefaultCheckTTL = 3 * time.Second
	// lockDelay is near zero: contender keys are per session and
	// never re-acquired by another, and fencing keeps handoffs safe.
	lockDelay = time.Millisecond
	// CheckNotes describe a session's TTL check in the Consul UI.
	CheckNotes = "kept passing by a rollagent process while it contends for or holds a slot"
	// AliveNotes describe a check that Consul runs against a rollagent
	// process for its session (SessionOptions.ConsulRunsCheck).
	AliveNotes = "passing while the rollagent process answers; its session, which it keeps to contend for slots, ends when this goes critical"
)

// SessionOptions configure NewSession.
type SessionOptions struct {
	// Name of the session and of its TTL check.
	// Optional, defaults to DefaultSessionName.
	Name string
	// TTL of the check the session is bound to.
	// Optional, defaults to DefaultCheckTTL.
	TTL time.Duration
	// NodeChecks are node-level checks the session is also bound to.
	// Optional, defaults to serfHealth, so a dead node loses its session.
	NodeChecks []string
	// CheckID names a TTL check of the caller's, already registered with
	// opts.TTL (with a service, say, so that one catalog write registers
	// both), for the session to be bound to and to keep passing. The caller
	// removes it after Close. Optional, defaults to a check of the
	// Session's own, registered by NewSession and removed by Close.
	CheckID string
	// ConsulRunsCheck says CheckID is a check that the Consul agent runs
	// itself, an HTTP check against the caller's process, say, so the
	// Session sends nothing to keep it passing and may live for as long as
	// the process, idle or not. Done then closes on Close or Abandon, or
	// once a Semaphore finds the session gone; a lost hold also shows in
	// Hold.Lost. Optional, defaults to false: CheckID is a TTL check that
	// the Session passes. Requires CheckID.
	ConsulRunsCheck bool
	// Logger. Optional, defaults to a null logger.
	Logger hclog.Logger
}

// Session is a Consul session bound to serfHealth and to a TTL check that
// it keeps passing, or to a check that Consul runs (ConsulRunsCheck).
// Done closes when the session is, or may be, gone.
type Session struct {
	c        *api.Client
	id       string
	checkID  string
	ownCheck bool // registered by NewSession, so removed by Close
	ttl      time.Duration
	log      hclog.Logger

	done     chan struct{}
	lostOnce sync.Once
	stop     context.CancelFunc
	wg       sync.WaitGroup
}

// NewSession registers the TTL check on the local agent, creates the session
// and starts keeping the check passing until Close or ctx ends.
func NewSession(ctx context.Context, c *api.Client, opts SessionOptions) (*Session, error) {
	opts = opts.withDefaults()
	if opts.ConsulRunsCheck && opts.CheckID == "" {
		return nil, errors.New("lockstep: ConsulRunsCheck needs the CheckID of the check Consul runs")
	}
	checkID, own := opts.CheckID, opts.CheckID == ""
	if own {
		checkID = NewCheckID(opts.Name)
		reg := &api.AgentCheckRegistration{ID: checkID, Name: opts.Name + " session", Notes: CheckNotes,
			AgentServiceCheck: api.AgentServiceCheck{TTL: opts.TTL.String(), Status: api.HealthPassing}}
		if err := c.Agent().CheckRegister(reg); err != nil {
			return nil, fmt.Errorf("lockstep: register check %s: %w", checkID, err)
		}
	}
	id, _, err := c.Session().Create(&api.SessionEntry{
		Name: opts.Name, Behavior: api.SessionBehaviorDelete, LockDelay: lockDelay,
		NodeChecks: append(append([]string{}, opts.NodeChecks...), checkID),
	}, (&api.WriteOptions{}).WithContext(ctx))
	if err != nil {
		if own {
			_ = c.Agent().CheckDeregister(checkID)
		}
		return nil, fmt.Errorf("lockstep: create session: %w", err)
	}
	kctx, stop := context.WithCancel(context.Background())
	s := &Session{c: c, id: id, checkID: checkID, ownCheck: own, ttl: opts.TTL, stop: stop,
		log: opts.Logger.With("session", id), done: make(chan struct{})}
	if !opts.ConsulRunsCheck {
		s.wg.Add(1)
		go s.keepPassing(kctx)
	}
	return s, nil
}

func (o SessionOptions) withDefaults() SessionOptions {
	if o.Name == "" {
		o.Name = DefaultSessionName
	}
	if o.TTL <= 0 {
		o.TTL = DefaultCheckTTL
	}
	if o.NodeChecks == nil {
		o.NodeChecks = []string{"serfHealth"}
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	return o
}

// ID is the Consul session ID.
func (s *Session) ID() string { return s.id }

// CheckID is the TTL check the session is bound to and keeps passing.
func (s *Session) CheckID() string { return s.checkID }

// Done closes when the session is lost: destroyed, invalidated by a failed
// check, or not provably alive because its check could not be passed for
// nearly a TTL.
func (s *Session) Done() <-chan struct{} { return s.done }

func (s *Session) lost(reason string, err error) {
	s.lostOnce.Do(func() {
		s.log.Warn("session lost", "reason", reason, "error", err)
		close(s.done)
	})
}

// keepPassing passes the TTL check every third of a TTL. The session is
// declared lost locally once no pass has succeeded for five sixths of a TTL:
// Consul starts its own clock later than we do, so we give up first.
func (s *Session) keepPassing(ctx context.Context) {
	defer s.wg.Done()
	tick := time.NewTicker(s.ttl / 3)
	defer tick.Stop()
	lastOK := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.done:
			return
		case <-tick.C:
		}
		start := time.Now()
		err := s.c.Agent().UpdateTTLOpts(s.checkID, "", api.HealthPassing, (&api.QueryOptions{}).WithContext(ctx))
		switch {
		case err == nil:
			lastOK = start
		case ctx.Err() != nil:
			return // Close stopped us mid-pass: not a lost session
		case isMissingCheck(err):
			s.lost("ttl check is gone from the agent", err)
			return
		case time.Since(lastOK) > s.ttl*5/6:
			s.lost("ttl check not passed in time", err)
			return
		default:
			s.log.Debug("ttl pass failed; retrying", "error", err)
		}
	}
}

func isMissingCheck(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "does not have associated TTL") || strings.Contains(msg, "Unknown check")
}

// isInvalidSession recognises Consul's answer for a session it has
// invalidated, for example while it was restarting.
func isInvalidSession(err error) bool {
	return err != nil && strings.Contains(err.Error(), "invalid session")
}

// Close destroys the session, which deletes every key it locked, and
// deregisters its check. It is safe to call more than once.
func (s *Session) Close(ctx context.Context) error {
	s.stop()
	s.wg.Wait()
	s.lost("closed", nil)
	_, err := s.c.Session().Destroy(s.id, (&api.WriteOptions{}).WithContext(ctx))
	if s.ownCheck {
		if derr := s.c.Agent().CheckDeregister(s.checkID); err == nil && derr != nil && !isMissingCheck(derr) {
			err = derr
		}
	}
	if err != nil {
		return fmt.Errorf("lockstep: close session %s: %w", s.id, err)
	}
	return nil
}

// Abandon stops passing the session's check and closes Done, without
// destroying the session: for a caller that removes the check next
// (SessionOptions.CheckID), which makes Consul invalidate the session,
// deleting every key it locked, in that same catalog write, one Raft write
// instead of two. If the removal fails, the session still ends about a TTL
// later: nobody passes its check any more. It is safe to call more than
// once, and after Close.
func (s *Session) Abandon() {
	s.stop()
	s.wg.Wait()
	s.lost("abandoned", nil)
}

// NewCheckID returns a fresh ID for a session's TTL check, for a caller
// that registers the check itself (see SessionOptions.CheckID). Each
// session gets a check of its own: a lost session must not be kept alive
// by its successor's passes.
func NewCheckID(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + "-session-" + hex.EncodeToString(b[:])
}
