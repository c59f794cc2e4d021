package agent

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/hashicorp/go-hclog"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/rollagent/rollagent/hashspec"
)

// oldInBackoff is a DockerAPI with one managed container, which Docker
// holds in its restart policy's delay after a crash until it is stopped:
// as Docker 20.10 does, it refuses to rename it then. renames is how many
// renames fail whatever the state (a daemon that refuses for another
// reason).
type oldInBackoff struct {
	DockerAPI
	restarting bool
	renames    int
	calls      []string
}

const oldID = "0ld0ld0ld0ld0ld0ld0ld0ld0ld0ld0ld0ld0ld0ld0ld0ld0ld0ld0ld0ld0ld0"

func (f *oldInBackoff) ContainerList(context.Context, container.ListOptions) ([]container.Summary, error) {
	return []container.Summary{{ID: oldID, Names: []string{"/rollagent-web-n1"}, Labels: map[string]string{LabelSHA: "old"}}}, nil
}

func (f *oldInBackoff) ContainerInspect(context.Context, string) (container.InspectResponse, error) {
	f.calls = append(f.calls, "inspect")
	return container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{
		State: &container.State{Running: f.restarting, Restarting: f.restarting}}}, nil
}

func (f *oldInBackoff) ContainerRename(_ context.Context, _, name string) error {
	f.calls = append(f.calls, "rename "+name)
	if f.renames > 0 {
		f.renames--
		return errors.New("Error response from daemon: name is reserved")
	}
	if f.restarting {
		return errors.New("Error response from daemon: sandbox 0b68a5c88d9d not found")
	}
	return nil
}

func (f *oldInBackoff) ContainerStop(context.Context, string, container.StopOptions) error {
	f.calls = append(f.calls, "stop")
	f.restarting = false
	return nil
}

func (f *oldInBackoff) ContainerCreate(_ context.Context, _ *container.Config, _ *container.HostConfig, _ *network.NetworkingConfig, _ *ocispec.Platform, name string) (container.CreateResponse, error) {
	f.calls = append(f.calls, "create "+name)
	return container.CreateResponse{ID: "new0new0new0new0"}, nil
}

func (f *oldInBackoff) ContainerStart(context.Context, string, container.StartOptions) error {
	f.calls = append(f.calls, "start")
	return nil
}

func (f *oldInBackoff) DaemonHost() string { return "unix:///var/run/docker.sock" }

// Replace sets aside an old container whatever Docker's restart policy is
// doing with it: one waiting to be restarted, which Docker will not rename,
// is stopped first (it runs nothing). A rename refused for another reason
// is errSetAside: the old workload was in the way, and nothing of the
// release ran.
func TestReplaceSetsAsideAnOldContainerWaitingToRestart(t *testing.T) {
	const (
		prev = "rename rollagent-web-n1-prev"
		cur  = "create rollagent-web-n1"
	)
	errStepFailed := errors.New("the step failed") // any error but errSetAside
	for _, tt := range []struct {
		name       string
		order      string
		restarting bool
		renames    int
		want       []string
		err        error
	}{
		{name: "running, stop-first", order: hashspec.OrderStopFirst,
			want: []string{prev, "stop", cur, "start"}},
		{name: "running, start-first", order: hashspec.OrderStartFirst,
			want: []string{prev, cur, "start"}},
		{name: "waiting to restart, stop-first", order: hashspec.OrderStopFirst, restarting: true,
			want: []string{prev, "inspect", "stop", prev, "stop", cur, "start"}},
		{name: "waiting to restart, start-first", order: hashspec.OrderStartFirst, restarting: true,
			want: []string{prev, "inspect", "stop", prev, cur, "start"}},
		// A disk full, say: the step's failure, counted against the
		// release as TestOutageDiskFullMidReplacement shows.
		{name: "rename refused otherwise", order: hashspec.OrderStopFirst, renames: 1,
			want: []string{prev, "inspect"}, err: errStepFailed},
		{name: "rename refused after the stop", order: hashspec.OrderStopFirst, restarting: true, renames: 2,
			want: []string{prev, "inspect", "stop", prev}, err: errSetAside},
	} {
		t.Run(tt.name, func(t *testing.T) {
			api := &oldInBackoff{restarting: tt.restarting, renames: tt.renames}
			d := NewDocker(api, "web", "n1", nil, hclog.NewNullLogger())
			spec := &hashspec.Spec{Name: "web", Container: hashspec.Container{Image: "example.com/web:2", Restart: "unless-stopped"},
				Update: hashspec.Update{Order: tt.order}}
			var steps []string
			err := d.Replace(context.Background(), spec, testSHA, func(_ context.Context, step string) error {
				steps = append(steps, step)
				return nil
			})
			switch {
			case tt.err == errStepFailed && (err == nil || errors.Is(err, errSetAside)):
				t.Fatalf("Replace = %v, want the step's failure, not %v", err, errSetAside)
			case tt.err != errStepFailed && (!errors.Is(err, tt.err) || (err == nil) != (tt.err == nil)):
				t.Fatalf("Replace = %v, want %v", err, tt.err)
			}
			if err != nil && !strings.Contains(err.Error(), "rename old container") {
				t.Errorf("Replace = %v, which does not say what it could not do", err)
			}
			if !reflect.DeepEqual(api.calls, tt.want) {
				t.Errorf("calls %q, want %q", api.calls, tt.want)
			}
			if steps[0] != "set old container aside" {
				t.Errorf("steps %q: setting the old container aside is not fenced first", steps)
			}
		})
	}
}
