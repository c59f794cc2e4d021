package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	"github.com/hashicorp/go-hclog"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/rollagent/rollagent/hashspec"
)

// DockerAPI is the part of the Docker Engine client the runtime uses.
type DockerAPI interface {
	ContainerList(ctx context.Context, options container.ListOptions) ([]container.Summary, error)
	ContainerInspect(ctx context.Context, id string) (container.InspectResponse, error)
	ContainerCreate(ctx context.Context, config *container.Config, host *container.HostConfig, net *network.NetworkingConfig, platform *ocispec.Platform, name string) (container.CreateResponse, error)
	ContainerStart(ctx context.Context, id string, options container.StartOptions) error
	ContainerStop(ctx context.Context, id string, options container.StopOptions) error
	ContainerRemove(ctx context.Context, id string, options container.RemoveOptions) error
	ContainerRename(ctx context.Context, id, newName string) error
	ImageInspect(ctx context.Context, ref string, opts ...client.ImageInspectOption) (image.InspectResponse, error)
	ImagePull(ctx context.Context, ref string, options image.PullOptions) (io.ReadCloser, error)
	DaemonHost() string
}

// containerStopTimeout is how long a container gets to stop before SIGKILL.
const containerStopTimeout = 10

// Docker manages one container per group and node through the Engine API.
// While a replacement runs, the old container is set aside under the name
// <name>-prev, so that an agent restarted at any point finds both and
// either finishes or restores.
type Docker struct {
	api    DockerAPI
	group  string
	node   string
	labels map[string]string // extra labels on every managed container
	log    hclog.Logger
}

// NewDocker returns the Docker runtime for group and node.
func NewDocker(api DockerAPI, group, node string, labels map[string]string, log hclog.Logger) *Docker {
	return &Docker{api: api, group: group, node: node, labels: labels, log: log.Named("docker")}
}

// Name is the managed container's name.
func (d *Docker) Name() string { return "rollagent-" + d.group + "-" + d.node }

func (d *Docker) prevName() string { return d.Name() + "-prev" }

// dockerErr makes an unreachable daemon say so, with its address, and
// marks it as errUnreachable: a fault of the node, not of a release.
func (d *Docker) dockerErr(what string, err error) error {
	if err == nil {
		return nil
	}
	if isUnreachable(err) {
		return unreachable{fmt.Errorf("%s: cannot reach the Docker daemon at %s: %w", what, d.api.DaemonHost(), err)}
	}
	return fmt.Errorf("%s: docker: %w", what, err)
}

// isUnreachable says err is the daemon's absence, not its answer: nothing
// listens on its socket, or it went away in the middle of a request.
func isUnreachable(err error) bool {
	return client.IsErrConnectionFailed(err) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET)
}

// unreachable marks an error as errUnreachable and keeps its message.
type unreachable struct{ error }

func (unreachable) Is(target error) bool { return target == errUnreachable }
func (u unreachable) Unwrap() error      { return u.error }

// pair is the managed container and the one set aside, either may be nil.
type pair struct{ cur, prev *container.Summary }

func (d *Docker) find(ctx context.Context) (pair, error) {
	args := filters.NewArgs(filters.Arg("label", LabelGroup+"="+d.group), filters.Arg("label", LabelNode+"="+d.node))
	list, err := d.api.ContainerList(ctx, container.ListOptions{All: true, Filters: args})
	if err != nil {
		return pair{}, d.dockerErr("list containers", err)
	}
	var p pair
	for i := range list {
		for _, n := range list[i].Names {
			switch strings.TrimPrefix(n, "/") {
			case d.Name():
				p.cur = &list[i]
			case d.prevName():
				p.prev = &list[i]
			}
		}
	}
	return p, nil
}

// Inspect reports the managed container's SHA from its label.
func (d *Docker) Inspect(ctx context.Context) (Observed, error) {
	p, err := d.find(ctx)
	if err != nil {
		return Observed{}, err
	}
	o := Observed{Leftover: p.prev != nil}
	if p.cur != nil {
		o.SHA, o.ImageID = p.cur.Labels[LabelSHA], p.cur.ImageID
	}
	return o, nil
}

// Prepare refuses bind mounts that another container could redirect (see
// checkHostMounts) and makes sure the image is present, pulling it if it
// is not.
func (d *Docker) Prepare(ctx context.Context, spec *hashspec.Spec, _ string) error {
	if err := d.checkHostMounts(ctx, spec, ""); err != nil {
		return err
	}
	ref := spec.Container.Image
	if _, err := d.api.ImageInspect(ctx, ref); err == nil {
		return nil
	} else if !cerrdefs.IsNotFound(err) && !strings.Contains(err.Error(), "No such image") {
		return d.dockerErr("inspect image "+ref, err)
	}
	d.log.Info("pulling image", "image", ref)
	rc, err := d.api.ImagePull(ctx, ref, image.PullOptions{})
	if err != nil {
		return d.dockerErr("image "+ref+" is not present and the pull failed", err)
	}
	defer rc.Close()
	if err := logPull(rc, d.log.With("image", ref)); err != nil {
		return fmt.Errorf("image %s is not present and the pull failed: %w", ref, err)
	}
	return nil
}
