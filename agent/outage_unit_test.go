package agent

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/hashicorp/go-hclog"
	"github.com/rollagent/rollagent/hashspec"
)

// The agent's retries while Consul is unreachable grow from retryMin to
// retryPause, each drawn from the upper half of its step so that a fleet
// that lost Consul at once does not come back at once, and start over after
// a success.
func TestBackoffIsJitteredAndExponential(t *testing.T) {
	var b backoff
	step := retryMin
	for i := range 12 {
		d := b.next()
		if d < step/2 || d > step {
			t.Fatalf("try %d: waited %s, want within [%s, %s]", i, d, step/2, step)
		}
		step = min(2*step, retryPause)
	}
	b.reset()
	if d := b.next(); d > retryMin {
		t.Fatalf("after reset: waited %s, want at most %s", d, retryMin)
	}
	seen := map[time.Duration]bool{}
	for range 20 {
		b.reset()
		seen[b.next()] = true
	}
	if len(seen) < 2 {
		t.Fatal("20 first waits were all equal: no jitter")
	}
}

func TestStoppedByDaemon(t *testing.T) {
	tests := []struct {
		name   string
		state  container.State
		policy container.RestartPolicyMode
		want   bool
	}{
		{"exited, unless-stopped", container.State{Status: "exited"}, container.RestartPolicyUnlessStopped, true},
		{"exited, always", container.State{Status: "exited"}, container.RestartPolicyAlways, true},
		{"exited, no policy: it exited by itself", container.State{Status: "exited"}, container.RestartPolicyDisabled, false},
		{"exited, on-failure: it may have exited 0 by itself", container.State{Status: "exited"}, container.RestartPolicyOnFailure, false},
		{"restarting: a crash loop", container.State{Status: "restarting", Running: true, Restarting: true}, container.RestartPolicyUnlessStopped, false},
		{"running", container.State{Status: "running", Running: true}, container.RestartPolicyUnlessStopped, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := tt.state
			insp := container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{State: &st,
				HostConfig: &container.HostConfig{RestartPolicy: container.RestartPolicy{Name: tt.policy}}}}
			if got := stoppedByDaemon(insp); got != tt.want {
				t.Fatalf("stoppedByDaemon = %v, want %v", got, tt.want)
			}
		})
	}
}

// inspectSeq is a DockerAPI whose ContainerInspect answers each of resps in
// turn and then the last one for good; an answer with a nil State stands
// for an unreachable daemon.
type inspectSeq struct {
	DockerAPI
	mu    sync.Mutex
	resps []container.InspectResponse
	away  error // what the client says when no daemon listens
}

func (f *inspectSeq) ContainerInspect(context.Context, string) (container.InspectResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.resps[0]
	if len(f.resps) > 1 {
		f.resps = f.resps[1:]
	}
	if r.ContainerJSONBase == nil {
		return r, f.away
	}
	return r, nil
}

func (f *inspectSeq) DaemonHost() string { return "unix:///test.sock" }

// A daemon that restarts while the new container is verified is away for
// a few polls, then shows the container stopped on its way down, then
// started again by its restart policy: none of that is ill health.
func TestWaitHealthyWaitsOutADaemonRestart(t *testing.T) {
	away := container.InspectResponse{}
	policy := &container.HostConfig{RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyUnlessStopped}}
	stopped := container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{HostConfig: policy,
		State: &container.State{Status: "exited"}}}
	running := container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{HostConfig: policy,
		State: &container.State{Status: "running", Running: true}}}
	spec := &hashspec.Spec{Update: hashspec.Update{MinHealthyTime: hashspec.Duration(300 * time.Millisecond),
		HealthyDeadline: hashspec.Duration(5 * time.Second)}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	gone := noDaemon(ctx, t)

	d := NewDocker(&inspectSeq{resps: []container.InspectResponse{stopped, away, away, running}, away: gone}, "web", "n1", nil, hclog.NewNullLogger())
	if err := d.WaitHealthy(ctx, spec); err != nil {
		t.Fatalf("WaitHealthy = %v, want nil once the container runs again", err)
	}

	spec.Update.HealthyDeadline = hashspec.Duration(time.Second)
	d = NewDocker(&inspectSeq{resps: []container.InspectResponse{away}, away: gone}, "web", "n1", nil, hclog.NewNullLogger())
	if err := d.WaitHealthy(ctx, spec); !errors.Is(err, errUnreachable) {
		t.Fatalf("WaitHealthy with the daemon away to the deadline = %v, want errUnreachable", err)
	}
}

// noDaemon is the error the Docker client gives when nothing listens on its
// socket.
func noDaemon(ctx context.Context, t *testing.T) error {
	t.Helper()
	cli, err := client.NewClientWithOpts(client.WithHost("unix://"+filepath.Join(t.TempDir(), "none.sock")), client.WithVersion("1.41"))
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	_, err = cli.ContainerInspect(ctx, "x")
	if !isUnreachable(err) {
		t.Fatalf("inspect without a daemon = %v, want an error isUnreachable recognises", err)
	}
	return err
}

// restoreFake lists a new container and the old one set aside, and fails
// every start, as a daemon on its way down does.
type restoreFake struct {
	DockerAPI
	list    []container.Summary
	renamed bool
}

func (f *restoreFake) ContainerList(context.Context, container.ListOptions) ([]container.Summary, error) {
	return f.list, nil
}
func (f *restoreFake) ContainerRemove(context.Context, string, container.RemoveOptions) error {
	return nil
}
func (f *restoreFake) ContainerStart(context.Context, string, container.StartOptions) error {
	return errors.New("Error response from daemon: failed to update store")
}
func (f *restoreFake) ContainerRename(context.Context, string, string) error {
	f.renamed = true
	return nil
}
func (f *restoreFake) DaemonHost() string { return "unix:///test.sock" }

// A restore whose start fails must leave the old container set aside, so
// that the next look finds the leftover and restores again; named back but
// stopped, it would pass for the node's workload and never be started.
func TestRestoreThatCannotStartLeavesTheLeftover(t *testing.T) {
	f := &restoreFake{list: []container.Summary{
		{ID: "new", Names: []string{"/rollagent-web-n1"}, Labels: map[string]string{LabelSHA: "v2"}},
		{ID: "old", Names: []string{"/rollagent-web-n1-prev"}, Labels: map[string]string{LabelSHA: "v1"}},
	}}
	d := NewDocker(f, "web", "n1", nil, hclog.NewNullLogger())
	if err := d.Restore(context.Background(), "v2"); err == nil {
		t.Fatal("Restore = nil, want the start's error")
	}
	if f.renamed {
		t.Fatal("the old container was named back although it could not be started")
	}
}
