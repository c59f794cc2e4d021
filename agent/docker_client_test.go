package agent_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/internal/testkit"
)

// fakeEngine answers the Engine API calls of a look and a health check, as
// an engine of API 1.41 (older than the client's default), and counts its
// pings. While gone is set it drops every connection, as a daemon that is
// not up yet.
type fakeEngine struct {
	host  string
	pings atomic.Int64
	gone  atomic.Bool
	// stall, when set, holds each ping, counted in arrived, until it is
	// closed.
	stall   chan struct{}
	arrived atomic.Int64
}

func newFakeEngine(t *testing.T) *fakeEngine {
	t.Helper()
	e := &fakeEngine{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if e.gone.Load() {
			if c, _, err := w.(http.Hijacker).Hijack(); err == nil {
				c.Close()
			}
			return
		}
		w.Header().Set("Api-Version", "1.41")
		w.Header().Set("Content-Type", "application/json")
		switch {
		case strings.HasSuffix(r.URL.Path, "/_ping"):
			e.arrived.Add(1)
			if e.stall != nil {
				<-e.stall
			}
			e.pings.Add(1)
			_, _ = w.Write([]byte("OK"))
		case strings.HasSuffix(r.URL.Path, "/containers/json"):
			_, _ = w.Write([]byte("[]"))
		default:
			_, _ = w.Write([]byte(`{"Id":"c1","State":{"Running":true,"Health":{"Status":"healthy"}}}`))
		}
	}))
	t.Cleanup(srv.Close)
	e.host = "tcp://" + strings.TrimPrefix(srv.URL, "http://")
	return e
}

// The agent's look lists containers (a listing with filters reads the API
// version) while its health check inspects one: on a client whose version
// is not negotiated yet, the health check's first request writes it. Under
// -race the plain client fails this; DialDocker's first requests wait for
// one ping instead.
func TestDialDockerFirstRequestsAtOnceDoNotRace(t *testing.T) {
	e := newFakeEngine(t)
	t.Setenv("DOCKER_HOST", e.host)
	const clients = 20
	for i := range clients {
		api, err := agent.DialDocker()
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		start := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			<-start
			o := container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", "x=y"))}
			if _, err := api.ContainerList(ctx, o); err != nil {
				t.Errorf("client %d: list: %v", i, err)
			}
		})
		wg.Go(func() {
			<-start
			if _, err := api.ContainerInspect(ctx, "c1"); err != nil {
				t.Errorf("client %d: inspect: %v", i, err)
			}
		})
		close(start)
		wg.Wait()
		cancel()
	}
	if n := e.pings.Load(); n != clients {
		t.Errorf("%d pings for %d clients, want one each", n, clients)
	}
}

// An agent may start before the Docker daemon: its requests fail as the
// daemon's absence, and the first one that gets through negotiates, once.
func TestDialDockerBeforeTheDaemon(t *testing.T) {
	e := newFakeEngine(t)
	t.Setenv("DOCKER_HOST", e.host)
	e.gone.Store(true)
	api, err := agent.DialDocker()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := api.ContainerList(ctx, container.ListOptions{}); !client.IsErrConnectionFailed(err) {
		t.Fatalf("a listing with no daemon: %v, want a failure to connect (the runtime's unreachable)", err)
	}
	e.gone.Store(false)
	for range 3 {
		if _, err := api.ContainerList(ctx, container.ListOptions{}); err != nil {
			t.Fatalf("listing once the daemon answers: %v", err)
		}
	}
	if n := e.pings.Load(); n != 1 {
		t.Errorf("%d pings answered, want 1: the version is negotiated once", n)
	}
}

// A request whose context ends while another one's ping holds the
// negotiation (a daemon that accepts and does not answer) stops waiting:
// a health check is not held past its own bound by the look's request.
func TestDialDockerWaitEndsWithItsContext(t *testing.T) {
	e := newFakeEngine(t)
	e.stall = make(chan struct{})
	t.Setenv("DOCKER_HOST", e.host)
	api, err := agent.DialDocker()
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() {
		_, err := api.ContainerList(context.Background(), container.ListOptions{})
		first <- err
	}()
	testkit.Eventually(t, 10*time.Second, "the first request's ping to reach the engine", func() bool { return e.arrived.Load() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	second := make(chan error, 1)
	go func() {
		_, err := api.ContainerInspect(ctx, "c1")
		second <- err
	}()
	select {
	case err := <-second:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("the second request: %v, want its deadline", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("the second request waited past its context for the first one's ping")
	}
	close(e.stall)
	if err := <-first; err != nil {
		t.Errorf("the first request, once the engine answered: %v", err)
	}
}
