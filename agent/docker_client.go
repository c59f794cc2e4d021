package agent

import (
	"context"
	"io"
	"sync/atomic"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// DialDocker returns the Engine API client of the environment (DOCKER_HOST
// and friends), safe to share between the agent's goroutines from its
// first request on.
//
// The client negotiates its API version lazily, on the first request of
// each goroutine that finds it not done yet, and some calls (a listing
// with filters among them) read the version before that, unlocked: two
// first requests at once (the agent's look and its health check) race on
// it. So nothing reaches the client until one ping has fixed the version,
// and until then requests wait for that ping in turn. A daemon that does
// not answer yet (the agent started before it) makes each request fail as
// unreachable, and the first one that gets through negotiates.
func DialDocker() (DockerAPI, error) {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, err
	}
	return &negotiated{c: cli, turn: make(chan struct{}, 1)}, nil
}

// negotiated is a client whose requests wait for its API version.
type negotiated struct {
	c *client.Client
	// turn admits one negotiation at a time; a request whose context ends
	// while it waits (a health check's, behind a ping to a daemon that
	// does not answer) stops waiting.
	turn chan struct{}
	done atomic.Bool
}

// ready negotiates the API version once, before any request reads it.
func (n *negotiated) ready(ctx context.Context) error {
	if n.done.Load() {
		return nil
	}
	select {
	case n.turn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-n.turn }()
	if n.done.Load() {
		return nil
	}
	ping, err := n.c.Ping(ctx)
	if err != nil {
		return err
	}
	n.c.NegotiateAPIVersionPing(ping)
	n.done.Store(true)
	return nil
}

func (n *negotiated) ContainerList(ctx context.Context, o container.ListOptions) ([]container.Summary, error) {
	if err := n.ready(ctx); err != nil {
		return nil, err
	}
	return n.c.ContainerList(ctx, o)
}

func (n *negotiated) ContainerInspect(ctx context.Context, id string) (container.InspectResponse, error) {
	if err := n.ready(ctx); err != nil {
		return container.InspectResponse{}, err
	}
	return n.c.ContainerInspect(ctx, id)
}

func (n *negotiated) ContainerCreate(ctx context.Context, config *container.Config, host *container.HostConfig,
	net *network.NetworkingConfig, platform *ocispec.Platform, name string) (container.CreateResponse, error) {
	if err := n.ready(ctx); err != nil {
		return container.CreateResponse{}, err
	}
	return n.c.ContainerCreate(ctx, config, host, net, platform, name)
}

func (n *negotiated) ContainerStart(ctx context.Context, id string, o container.StartOptions) error {
	if err := n.ready(ctx); err != nil {
		return err
	}
	return n.c.ContainerStart(ctx, id, o)
}

func (n *negotiated) ContainerStop(ctx context.Context, id string, o container.StopOptions) error {
	if err := n.ready(ctx); err != nil {
		return err
	}
	return n.c.ContainerStop(ctx, id, o)
}

func (n *negotiated) ContainerRemove(ctx context.Context, id string, o container.RemoveOptions) error {
	if err := n.ready(ctx); err != nil {
		return err
	}
	return n.c.ContainerRemove(ctx, id, o)
}

func (n *negotiated) ContainerRename(ctx context.Context, id, newName string) error {
	if err := n.ready(ctx); err != nil {
		return err
	}
	return n.c.ContainerRename(ctx, id, newName)
}

func (n *negotiated) ImageInspect(ctx context.Context, ref string, opts ...client.ImageInspectOption) (image.InspectResponse, error) {
	if err := n.ready(ctx); err != nil {
		return image.InspectResponse{}, err
	}
	return n.c.ImageInspect(ctx, ref, opts...)
}

func (n *negotiated) ImagePull(ctx context.Context, ref string, o image.PullOptions) (io.ReadCloser, error) {
	if err := n.ready(ctx); err != nil {
		return nil, err
	}
	return n.c.ImagePull(ctx, ref, o)
}

func (n *negotiated) DaemonHost() string { return n.c.DaemonHost() }
