package integration

import (
	"fmt"
	"strconv"
	"time"

	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/fleettest"
)

// nemesisAuthor signs every write of the nemesis: a desired SHA written
// by another author during a run is an automatic rollback.
const nemesisAuthor = "nemesis"

// slowFor makes a good release unhealthy for its first 20s: its verify
// runs most of healthy_deadline inside the hold. Its health check's
// start_period (slowStart) covers that time: Docker says "starting" until
// the first probe passes, as for a real slow starter, where without it
// three failed probes would make it unhealthy, and so a bad release, in
// a second and a half.
const slowFor = "20s"

const slowStart = 25 * time.Second

// typoImage names an image that no node has and none can pull.
const typoImage = "rollagent-it/demoapp:typo"

// apply runs one event. An error is the operation's, logged on the
// timeline: the nemesis goes on, and the invariants judge the product.
func (n *nemesis) apply(e event) error {
	switch e.kind {
	case opCommit, opCommitBad, opCommitSlow, opCommitTypo, opCommitPull:
		return n.commit(e)
	case opCancel:
		return n.cancel(e.group)
	case opRollback:
		ctx, cancel := n.c.ctx()
		defer cancel()
		res, err := n.c.store().Rollback(ctx, e.group, "", nemesisAuthor)
		if err == nil {
			n.note("rollback %s -> %s", e.group, coordinator.ShortSHA(res.SHA))
		}
		return err
	case opResume:
		ctx, cancel := n.c.ctx()
		defer cancel()
		_, err := n.c.store().ResumeBy(ctx, e.group, nemesisAuthor)
		if err == nil {
			n.mu.Lock()
			n.resumeCalls++
			n.mu.Unlock()
		}
		return err
	case opPromote:
		return n.promote(e.group)
	case opPause:
		ctx, cancel := n.c.ctx()
		defer cancel()
		sha, already, err := n.c.store().PauseBy(ctx, e.group, "nemesis", nemesisAuthor)
		if err == nil && !already {
			n.mu.Lock()
			n.pauseCalls++
			n.mu.Unlock()
			n.note("paused %s of %s (the call returned)", coordinator.ShortSHA(sha), e.group)
		}
		return err
	case opCheckFail, opCheckPass:
		return n.flipGate(e.kind == opCheckFail)
	case opKillLeader, opStartSrv:
		return n.server(e.kind == opKillLeader)
	}
	return n.fault(e)
}

// commit commits a release with a generation of its own in its env, so
// that every commit is a new SHA that no cancel has touched, with the
// group's K.
func (n *nemesis) commit(e event) error {
	if e.group == hks {
		return n.commitHooks(e)
	}
	n.c.nemesisGen++
	gen := n.c.nemesisGen
	release := []string{"v1", "v2", "v3"}[gen%3]
	image, env := n.c.releases.Image(release, nil), map[string]string{"NEMESIS_GEN": strconv.Itoa(gen)}
	var stallEnd time.Time
	switch e.kind {
	case opCommitBad:
		release = "bad"
		image = n.c.releases.Image(release, map[string]string{"DEMOAPP_UNHEALTHY": "1"})
	case opCommitSlow:
		release += "-slow"
		env["DEMOAPP_UNHEALTHY_FOR"] = slowFor
	case opCommitTypo:
		release, image = "typo", typoImage
	case opCommitPull:
		var err error
		release += "-pulled"
		if image, stallEnd, err = n.pulled(image, gen, e.stall); err != nil {
			return err
		}
	}
	spec := fleettest.Spec(n.t, fleettest.SpecOptions{Group: e.group, Image: image,
		MaxParallel: n.k(e.group), FailureAction: e.action, MaxFailures: e.maxF, HealthyDeadline: testHealthyDeadline,
		ProbeTimeout: probeTimeout, ProbeRetries: probeRetries, Env: env})
	spec.Update.BlockOn = gateBlocks()
	if e.kind == opCommitSlow {
		spec.Container.Healthcheck.StartPeriod = hashspec.Duration(slowStart)
	}
	ordered(spec, e)
	ctx, cancel := n.c.ctx()
	defer cancel()
	res, err := n.c.store().Commit(ctx, e.group, spec, nemesisAuthor, "commit")
	if err != nil {
		return err
	}
	n.noteOrder(res.SHA, e)
	n.mu.Lock()
	n.bad[res.SHA] = e.kind == opCommitBad || e.kind == opCommitTypo
	n.committed[res.SHA] = true
	n.mu.Unlock()
	n.note("committed %s to %s: %s", release, e.group, coordinator.ShortSHA(res.SHA))
	if e.kind == opCommitPull {
		n.pullCommitted(res.SHA, stallEnd)
	}
	return nil
}

// cancel cancels the desired SHA and notes when Consul had applied it:
// by the time the call returns. Invariant (b) is judged from then.
func (n *nemesis) cancel(group string) error {
	ctx, cancel := n.c.ctx()
	defer cancel()
	res, err := n.c.store().Cancel(ctx, group, "", nemesisAuthor, nemesisAuthor)
	if err != nil {
		return err
	}
	at := time.Now()
	n.mu.Lock()
	n.cancelled[res.SHA] = at
	n.mu.Unlock()
	n.note("cancelled %s of %s (the call returned)", coordinator.ShortSHA(res.SHA), group)
	return nil
}

// server kills the leading server, or starts the one killed.
func (n *nemesis) server(kill bool) error {
	n.f.mu.Lock()
	down := n.f.server
	n.f.mu.Unlock()
	if !kill {
		if down == "" {
			return nil
		}
		n.f.mu.Lock()
		n.f.server = ""
		n.f.mu.Unlock()
		return n.c.startErr(down)
	}
	if !n.c.serversWhole() {
		return fmt.Errorf("skipped: not every server is back and agrees on a leader yet")
	}
	leader, err := n.c.leaderErr()
	if err != nil {
		return err
	}
	n.f.mu.Lock()
	n.f.server = leader
	n.f.mu.Unlock()
	n.note("leader %s killed", leader)
	return n.c.killErr(leader)
}
