package agent_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/internal/dockertest"
	"github.com/rollagent/rollagent/internal/retry"
	"github.com/rollagent/rollagent/internal/testkit"
	"github.com/rollagent/rollagent/internal/watch"
)

// drainWatch records, on the test's monotonic clock, what Consul's health
// API says of one service instance (a blocking watch of
// /v1/health/service/<name>?passing) and what Docker says of the group's
// containers (its events), so that a test can order a drain against the
// old container's stop and the new one's health from their own state.
type drainWatch struct {
	mu     sync.Mutex
	health []healthSeen
	docker []dockerSeen
	errs   []error
}

// healthSeen is one answer of the health watch: at is when it arrived, so
// the instance's passing or not happened at or before at.
type healthSeen struct {
	at      time.Time
	passing bool
}

// dockerSeen is one of Docker's container events, at its own time put on
// the test's monotonic clock (the engine runs on this host: its clock is
// the one time.Now reads).
type dockerSeen struct {
	at     time.Time
	id     string
	action string
}

// watchDrain starts both watches until the test ends.
func watchDrain(t *testing.T, c *api.Client, cli *client.Client, group, service, id string) *drainWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	w := &drainWatch{}
	msgs, errs := cli.Events(ctx, events.ListOptions{Filters: filters.NewArgs(filters.Arg("type", "container"),
		filters.Arg("label", agent.LabelGroup+"="+group), filters.Arg("label", dockertest.Label+"="+dockertest.RunID()))})
	wg.Add(2)
	go func() { defer wg.Done(); w.watchDocker(ctx, msgs, errs) }()
	go func() { defer wg.Done(); w.watchHealth(ctx, c, service, id) }()
	testkit.Eventually(t, 10*time.Second, "the health watch's first answer", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.health) > 0
	})
	return w
}

func (w *drainWatch) watchDocker(ctx context.Context, msgs <-chan events.Message, errs <-chan error) {
	for {
		select {
		case m := <-msgs:
			if strings.HasPrefix(string(m.Action), "exec_") {
				continue // the health probes: their outcome is the health_status event
			}
			now := time.Now()
			at := now.Add(-time.Duration(now.UnixNano() - m.TimeNano))
			w.mu.Lock()
			w.docker = append(w.docker, dockerSeen{at: at, id: m.Actor.ID, action: string(m.Action)})
			w.mu.Unlock()
		case err := <-errs:
			if ctx.Err() == nil {
				w.fail(fmt.Errorf("docker events: %w", err))
			}
			return
		case <-ctx.Done():
			return
		}
	}
}

// watchHealth follows the passing instances of service with blocking
// queries, each bounded by its wait time, until ctx ends.
func (w *drainWatch) watchHealth(ctx context.Context, c *api.Client, service, id string) {
	// The first failed query ends the watch (recorded unless ctx ended), so
	// the backoff never paces one.
	opts := watch.Options{Backoff: retry.NewSteady(time.Second, time.Second)}
	watch.Run(ctx, opts, func(ctx context.Context, index uint64) (uint64, bool, error) {
		q := (&api.QueryOptions{WaitIndex: index, WaitTime: 5 * time.Second}).WithContext(ctx)
		entries, meta, err := c.Health().Service(service, "", true, q)
		at := time.Now()
		if err != nil {
			if ctx.Err() == nil {
				w.fail(fmt.Errorf("health watch: %w", err))
			}
			return 0, true, nil
		}
		passing := false
		for _, e := range entries {
			passing = passing || e.Service.ID == id
		}
		w.mu.Lock()
		if n := len(w.health); n == 0 || w.health[n-1].passing != passing {
			w.health = append(w.health, healthSeen{at: at, passing: passing})
		}
		w.mu.Unlock()
		return meta.LastIndex, false, nil
	})
}

func (w *drainWatch) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.errs = append(w.errs, err)
}

// passing says what the last answer of the health watch said.
func (w *drainWatch) passing() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.health) > 0 && w.health[len(w.health)-1].passing
}

// event is the time of the first event of action on container id after
// after, or false.
func (w *drainWatch) event(id, action string, after time.Time) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, e := range w.docker {
		if e.id == id && e.action == action && e.at.After(after) {
			return e.at, true
		}
	}
	return time.Time{}, false
}

// flips are the health watch's changes after from: when the instance went
// out of the passing set and when it came back, in turn.
func (w *drainWatch) flips(from time.Time) []healthSeen {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []healthSeen
	for _, h := range w.health {
		if h.at.After(from) {
			out = append(out, h)
		}
	}
	return out
}

// check fails t with what either watch could not do.
func (w *drainWatch) check(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, err := range w.errs {
		t.Error(err)
	}
}

// story is the watches' record, for a failure message.
func (w *drainWatch) story(from time.Time) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var b strings.Builder
	for _, h := range w.health {
		fmt.Fprintf(&b, "  %8s health passing=%v\n", h.at.Sub(from).Round(time.Millisecond), h.passing)
	}
	for _, e := range w.docker {
		fmt.Fprintf(&b, "  %8s docker %s %s\n", e.at.Sub(from).Round(time.Millisecond), e.id[:12], e.action)
	}
	return b.String()
}
