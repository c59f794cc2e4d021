package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/hashicorp/go-hclog"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
)

// Replace sets the old container aside and starts the new one, in the
// order the spec's update policy says. step fences each destructive step.
func (d *Docker) Replace(ctx context.Context, spec *hashspec.Spec, sha string, step StepFunc) error {
	p, err := d.find(ctx)
	if err != nil {
		return err
	}
	if p.prev != nil {
		return fmt.Errorf("%s still exists: %w", d.prevName(), errInterrupted)
	}
	cfg, host, err := containerConfig(spec, sha, d.group, d.node, d.labels)
	if err != nil {
		return err
	}
	stopFirst := spec.Update.Order != hashspec.OrderStartFirst
	if p.cur != nil {
		if err := step(ctx, "set old container aside"); err != nil {
			return err
		}
		if err := d.setAside(ctx, p.cur.ID, stopFirst); err != nil {
			return err
		}
	}
	if err := step(ctx, "start new container"); err != nil {
		return err
	}
	created, err := d.api.ContainerCreate(ctx, cfg, host, nil, nil, d.Name())
	if err != nil {
		return d.dockerErr("create container", err)
	}
	if err := d.checkHostMounts(ctx, spec, created.ID); err != nil {
		rmErr := d.api.ContainerRemove(ctx, created.ID, container.RemoveOptions{Force: true})
		return errors.Join(err, d.dockerErr("remove refused container", rmErr))
	}
	d.log.Info("starting new container", "id", created.ID[:12], "image", spec.Container.Image)
	return d.dockerErr("start container", d.api.ContainerStart(ctx, created.ID, container.StartOptions{}))
}

// setAside renames the old container out of the managed name, and stops
// it when the update stops the old workload first. Docker refuses to
// rename a container that waits out its restart policy's delay after a
// crash (it counts as running, with its network sandbox gone): that one
// runs nothing, and is stopped first, which also cancels the restart that
// would bring it back beside the new one.
//
// An old container still in the way after that failed for its own sake,
// before anything of the release ran: the node's fault, never the
// release's (errSetAside). Any other failure to set it aside (a disk
// full, say) is the step's, counted as ever.
func (d *Docker) setAside(ctx context.Context, id string, stopFirst bool) error {
	err := d.api.ContainerRename(ctx, id, d.prevName())
	if err != nil && d.restarting(ctx, id) {
		d.log.Info("the old container waits to be restarted: stopping it before it is set aside", "id", id[:min(12, len(id))])
		if err := d.stop(ctx, id); err != nil {
			return fmt.Errorf("%w: %w", errSetAside, err)
		}
		if err := d.api.ContainerRename(ctx, id, d.prevName()); err != nil {
			return fmt.Errorf("%w: %w", errSetAside, d.dockerErr("rename old container", err))
		}
		err = nil
	}
	if err != nil {
		return d.dockerErr("rename old container", err)
	}
	if stopFirst {
		return d.stop(ctx, id)
	}
	return nil
}

// restarting says Docker holds container id in its restart policy's delay.
func (d *Docker) restarting(ctx context.Context, id string) bool {
	insp, err := d.api.ContainerInspect(ctx, id)
	return err == nil && insp.State != nil && insp.State.Restarting
}

func (d *Docker) stop(ctx context.Context, id string) error {
	t := containerStopTimeout
	return d.dockerErr("stop container", d.api.ContainerStop(ctx, id, container.StopOptions{Timeout: &t}))
}

// Finish removes the old container.
func (d *Docker) Finish(ctx context.Context) error {
	p, err := d.find(ctx)
	if err != nil || p.prev == nil {
		return err
	}
	return d.dockerErr("remove old container", d.api.ContainerRemove(ctx, p.prev.ID, container.RemoveOptions{Force: true}))
}

// Restore removes the container that runs sha, if that is the managed one,
// and starts the old one again under its own name, if one was set aside.
// A fence that stopped the first step leaves the old container in place,
// and Restore leaves it alone.
func (d *Docker) Restore(ctx context.Context, sha string) error {
	p, err := d.find(ctx)
	if err != nil {
		return err
	}
	if p.cur != nil && p.cur.Labels[LabelSHA] == sha {
		if err := d.api.ContainerRemove(ctx, p.cur.ID, container.RemoveOptions{Force: true}); err != nil {
			return d.dockerErr("remove failed container", err)
		}
		p.cur = nil
	}
	if p.prev == nil || p.cur != nil {
		return nil
	}
	// Started before it gets its name back: if the start fails (its daemon
	// going away, say), it is still set aside, and the next look finds it
	// and restores again, rather than take a stopped container for the
	// node's workload.
	if err := d.api.ContainerStart(ctx, p.prev.ID, container.StartOptions{}); err != nil {
		return d.dockerErr("start old container", err)
	}
	if err := d.api.ContainerRename(ctx, p.prev.ID, d.Name()); err != nil {
		return d.dockerErr("rename old container back", err)
	}
	d.log.Info("restored the old container", "sha", coordinator.ShortSHA(p.prev.Labels[LabelSHA]))
	return nil
}

// Healthy reports the managed container's health now.
func (d *Docker) Healthy(ctx context.Context) (bool, string) {
	insp, err := d.api.ContainerInspect(ctx, d.Name())
	if err != nil {
		return false, d.dockerErr("inspect", err).Error()
	}
	return healthNow(insp)
}

// Health judges the managed container by Docker's own state: down when
// there is none, or it is not running, restarting or paused, or Docker's
// health status is unhealthy, which it sets only after the probe's
// retries; a container still starting is failing, not down. A daemon that
// does not answer tells nothing: failing.
func (d *Docker) Health(ctx context.Context) (Health, string) {
	insp, err := d.api.ContainerInspect(ctx, d.Name())
	switch {
	case err != nil && cerrdefs.IsNotFound(err):
		return HealthDown, "no container"
	case err != nil:
		return HealthFailing, d.dockerErr("inspect", err).Error()
	}
	return judgeContainer(insp)
}

// judgeContainer is Health for one inspection.
func judgeContainer(insp container.InspectResponse) (Health, string) {
	ok, why := healthNow(insp)
	st := insp.State
	switch {
	case ok:
		return HealthUp, why
	case st == nil:
		return HealthFailing, why
	case st.Restarting || st.Paused || !st.Running:
		return HealthDown, why
	case st.Health != nil && st.Health.Status == container.Unhealthy:
		return HealthDown, why
	}
	return HealthFailing, why
}

func healthNow(insp container.InspectResponse) (bool, string) {
	st := insp.State
	switch {
	case st == nil:
		return false, "no state"
	case st.Restarting:
		// Docker keeps Running true while a restart policy restarts a
		// container that exited: a crash loop must not read as running.
		return false, fmt.Sprintf("restarting (exit code %d)", st.ExitCode)
	case st.Paused:
		return false, "paused"
	case !st.Running:
		return false, fmt.Sprintf("%s (exit code %d)", st.Status, st.ExitCode)
	case st.Health != nil && st.Health.Status != container.Healthy:
		return false, "health: " + st.Health.Status + lastProbe(st.Health)
	}
	return true, "running"
}

func lastProbe(h *container.Health) string {
	if h == nil || len(h.Log) == 0 {
		return ""
	}
	last := h.Log[len(h.Log)-1]
	// A probe's output most often ends in a newline, which would end up
	// inside the parentheses of every record and log line that quotes it.
	return fmt.Sprintf(" (last probe exit %d: %.200s)", last.ExitCode, strings.TrimSpace(last.Output))
}

// WaitHealthy polls the new container until it has been healthy (or, with
// no health check, running) for min_healthy_time, and gives up at
// healthy_deadline or as soon as it exits (restarting counts) or turns
// unhealthy. While its daemon is away, or has just stopped it on its way
// down, its health is unknown, which is not ill health: it keeps polling,
// and an error at the deadline then says errUnreachable.
func (d *Docker) WaitHealthy(ctx context.Context, spec *hashspec.Spec) error {
	u := spec.Update
	ctx, cancel := context.WithTimeout(ctx, u.HealthyDeadline.Std())
	defer cancel()
	var since time.Time
	var away error // why the health is unknown now
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		insp, err := d.api.ContainerInspect(ctx, d.Name())
		switch {
		case err != nil && ctx.Err() != nil:
		case err != nil && isUnreachable(err):
			away, since = d.dockerErr("inspect new container", err), time.Time{}
		case err != nil:
			return d.dockerErr("inspect new container", err)
		case stoppedByDaemon(insp):
			away, since = unreachable{errors.New("its daemon stopped it, and its restart policy starts it again")}, time.Time{}
		default:
			away = nil
			ok, why := healthNow(insp)
			if insp.State != nil && insp.State.Status == "created" {
				// Created by a step that was cut off before it started it.
				return fmt.Errorf("new container was created but never started: %w", errInterrupted)
			}
			if !ok && (insp.State == nil || !insp.State.Running || insp.State.Restarting ||
				insp.State.Health != nil && insp.State.Health.Status == container.Unhealthy) {
				return fmt.Errorf("new container is not healthy: %s", why)
			}
			if !ok {
				since = time.Time{}
			} else if since.IsZero() {
				since = time.Now()
			} else if time.Since(since) >= u.MinHealthyTime.Std() {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			err := fmt.Errorf("new container not healthy for %s within healthy_deadline %s", u.MinHealthyTime, u.HealthyDeadline)
			if away != nil {
				return fmt.Errorf("%w: %w", err, away)
			}
			return err
		case <-tick.C:
		}
	}
}

// stoppedByDaemon says the container exited and will not be restarted now
// although its policy restarts it whatever its exit: Docker does that only
// for a container stopped on purpose, by its daemon shutting down or by
// someone's docker stop, never for one that exited by itself.
func stoppedByDaemon(insp container.InspectResponse) bool {
	if insp.State == nil || insp.HostConfig == nil || insp.State.Running || insp.State.Restarting || insp.State.Status != "exited" {
		return false
	}
	p := insp.HostConfig.RestartPolicy.Name
	return p == container.RestartPolicyAlways || p == container.RestartPolicyUnlessStopped
}

// logPull logs the pull's progress messages and returns its error message.
func logPull(r io.Reader, log hclog.Logger) error {
	dec := json.NewDecoder(r)
	for {
		var m struct {
			Status, Progress, ID string
			Error                string `json:"error"`
		}
		if err := dec.Decode(&m); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		if m.Error != "" {
			return fmt.Errorf("%s", m.Error)
		}
		log.Debug("pull", "status", m.Status, "layer", m.ID, "progress", m.Progress)
	}
}
