package dockertest

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
)

// settleWithoutHealthcheck is how long a container with no HEALTHCHECK must
// stay running to count as healthy: long enough to catch a binary that
// exits at once on a bad flag or a port clash.
const settleWithoutHealthcheck = time.Second

// WaitHealthy polls the container every 200ms until Docker reports it
// healthy, or, without a HEALTHCHECK, until it has run for a second. It
// returns an error as soon as the container is unhealthy or has exited,
// with the last health check's output, or when ctx ends.
func WaitHealthy(ctx context.Context, cli *client.Client, id string) error {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	w := healthWatch{id: id}
	for {
		info, err := cli.ContainerInspect(ctx, id)
		if err != nil {
			if ctx.Err() != nil {
				return w.timeout(ctx.Err())
			}
			return fmt.Errorf("waiting for container %s to be healthy: %w", w.name(), err)
		}
		if done, err := w.observe(info, time.Now()); done {
			return err
		}
		select {
		case <-ctx.Done():
			return w.timeout(ctx.Err())
		case <-tick.C:
		}
	}
}

// healthWatch remembers what the polls saw, so that an error can say what
// the container was doing when time ran out.
type healthWatch struct {
	id, containerName string
	status            string // last State.Health.Status, or the run state without a healthcheck
	lastCheck         string // last health log entry, rendered
	startedAt         string // State.StartedAt when runningSince was taken; a restart changes it
	runningSince      time.Time
}

func (w *healthWatch) name() string {
	id := w.id
	if len(id) > 12 {
		id = id[:12]
	}
	if w.containerName == "" {
		return id
	}
	return w.containerName + " (" + id + ")"
}

// observe reports done with a nil error when the container is healthy, done
// with an error when it never will be, and not done otherwise.
func (w *healthWatch) observe(info container.InspectResponse, now time.Time) (bool, error) {
	if info.ContainerJSONBase == nil || info.State == nil {
		return false, nil
	}
	w.containerName = strings.TrimPrefix(info.Name, "/")
	s := info.State
	w.status = string(s.Status)
	if s.Health != nil {
		w.status = string(s.Health.Status)
		if n := len(s.Health.Log); n > 0 && s.Health.Log[n-1] != nil {
			last := s.Health.Log[n-1]
			w.lastCheck = fmt.Sprintf("exit %d: %s", last.ExitCode, clip(strings.TrimSpace(last.Output), 400))
		}
	}
	if !s.Running {
		if s.Status == container.StateCreated || s.Status == "" {
			return false, nil // not started yet: the caller may be about to
		}
		return true, fmt.Errorf("container %s is %s (exit code %d%s) before becoming healthy%s",
			w.name(), s.Status, s.ExitCode, exitDetail(s), w.checkSuffix())
	}
	switch {
	case s.Health == nil || s.Health.Status == container.NoHealthcheck:
		if s.StartedAt != w.startedAt {
			w.startedAt, w.runningSince = s.StartedAt, now
		}
		return now.Sub(w.runningSince) >= settleWithoutHealthcheck, nil
	case s.Health.Status == container.Healthy:
		return true, nil
	case s.Health.Status == container.Unhealthy:
		return true, fmt.Errorf("container %s is unhealthy after %d failed checks%s",
			w.name(), s.Health.FailingStreak, w.checkSuffix())
	}
	return false, nil
}

func (w *healthWatch) checkSuffix() string {
	if w.lastCheck == "" {
		return ""
	}
	return "; last check: " + w.lastCheck
}

func (w *healthWatch) timeout(err error) error {
	status := w.status
	if status == "" {
		status = "never inspected"
	}
	return fmt.Errorf("container %s not healthy: %w (status %s%s)", w.name(), err, status, w.checkSuffix())
}

func exitDetail(s *container.State) string {
	var d string
	if s.OOMKilled {
		d += ", OOM-killed"
	}
	if s.Error != "" {
		d += ", " + s.Error
	}
	return d
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
