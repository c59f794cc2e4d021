package integration

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// pushHeader marks the test's own pushes, which a stall lets through: a
// stall is of the pulls, which Docker makes for the agents.
const pushHeader = "X-Nemesis-Push"

// pullRegistry is an image registry served by the test process on
// loopback, in memory. Docker reaches it because the daemon runs in the
// test process's network namespace, not the agents' (they call it through
// its socket), and it takes loopback registries for insecure ones, plain
// HTTP allowed. It can stall the pulls (manifests and blobs) for a while:
// a registry that is slow to answer.
type pullRegistry struct {
	t      *testing.T
	docker *client.Client
	addr   string // host:port
	srv    *http.Server
	h      http.Handler
	dir    string
	repo   string

	mu     sync.Mutex
	until  time.Time     // pulls wait until then
	wake   chan struct{} // closed when a stall is healed early
	images map[string]v1.Image
	pushed []string // references pushed, untagged in Docker at the end

	stalled atomic.Int64 // pulls that waited
}

// registry returns the cluster's registry, started on first use. One for
// the whole cluster, every seed: a SHA from an earlier seed that is rolled
// back to is pulled again from it.
func (c *cluster) registry() *pullRegistry {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reg != nil {
		return c.reg
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		c.t.Fatalf("registry: %v", err)
	}
	r := &pullRegistry{t: c.t, docker: c.docker, addr: l.Addr().String(), dir: c.t.TempDir(),
		repo: "rollagent-it/demoapp-pulled", wake: make(chan struct{}), images: map[string]v1.Image{}}
	r.h = registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	r.srv = &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = r.srv.Serve(l) }() // ends with Close
	c.t.Cleanup(r.close)
	c.reg = r
	return r
}

func (r *pullRegistry) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	p := req.URL.Path
	if req.Header.Get(pushHeader) == "" && (strings.Contains(p, "/manifests/") || strings.Contains(p, "/blobs/")) {
		r.wait(req.Context())
	}
	r.h.ServeHTTP(w, req)
}

// wait holds a pull until the stall's end, its heal, or the client gives
// up (the agent's pull bound cancels it).
func (r *pullRegistry) wait(ctx context.Context) {
	r.mu.Lock()
	d, wake := time.Until(r.until), r.wake
	r.mu.Unlock()
	if d <= 0 {
		return
	}
	r.stalled.Add(1)
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
	case <-wake:
	case <-ctx.Done():
	}
}

// stall makes pulls wait for d from now (or longer, if a stall already
// under way ends later), and returns when the stall ends.
func (r *pullRegistry) stall(d time.Duration) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if end := time.Now().Add(d); end.After(r.until) {
		r.until = end
	}
	return r.until
}

// heal ends a stall at once: the nemesis has stopped.
func (r *pullRegistry) heal() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Until(r.until) > 0 {
		close(r.wake)
		r.wake = make(chan struct{})
	}
	r.until = time.Time{}
}

// push puts the local image under a tag of the registry that nothing has
// pulled yet, so that a pull of it must reach the registry, and returns
// the reference to commit.
func (r *pullRegistry) push(local, tag string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	img, err := r.image(ctx, local)
	if err != nil {
		return "", err
	}
	ref := r.addr + "/" + r.repo + ":" + tag
	nt, err := name.NewTag(ref, name.Insecure)
	if err != nil {
		return "", err
	}
	if err := remote.Write(nt, img, remote.WithContext(ctx), remote.WithTransport(pushTransport{})); err != nil {
		return "", fmt.Errorf("push %s: %w", ref, err)
	}
	r.mu.Lock()
	r.pushed = append(r.pushed, ref)
	r.mu.Unlock()
	return ref, nil
}

// image reads a local image out of Docker once (docker save).
func (r *pullRegistry) image(ctx context.Context, local string) (v1.Image, error) {
	r.mu.Lock()
	img, ok := r.images[local]
	r.mu.Unlock()
	if ok {
		return img, nil
	}
	rc, err := r.docker.ImageSave(ctx, []string{local})
	if err != nil {
		return nil, fmt.Errorf("save %s: %w", local, err)
	}
	defer rc.Close()
	path := filepath.Join(r.dir, strings.NewReplacer("/", "_", ":", "_").Replace(local)+".tar")
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if _, err := io.Copy(f, rc); err != nil {
		f.Close()
		return nil, fmt.Errorf("save %s: %w", local, err)
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	img, err = tarball.ImageFromPath(path, nil)
	if err != nil {
		return nil, fmt.Errorf("read the save of %s: %w", local, err)
	}
	r.mu.Lock()
	r.images[local] = img
	r.mu.Unlock()
	return img, nil
}

// close stops the registry and untags what Docker pulled from it (the
// image itself is the local release's, removed with it).
func (r *pullRegistry) close() {
	r.heal()
	_ = r.srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r.mu.Lock()
	refs := r.pushed
	r.mu.Unlock()
	for _, ref := range refs {
		if _, err := r.docker.ImageRemove(ctx, ref, image.RemoveOptions{Force: true}); err != nil && !strings.Contains(err.Error(), "No such image") {
			r.t.Logf("untag %s: %v", ref, err)
		}
	}
}

// pushTransport marks the test's pushes (pushHeader).
type pushTransport struct{}

func (pushTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set(pushHeader, "1")
	return http.DefaultTransport.RoundTrip(req)
}
