// Package fleettest holds what the agent tests and the integration suite
// share about a fleet: demo releases built as images, fast-rolling specs,
// each node's workload as Docker sees it, and bounded waits.
package fleettest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/dockertest"
	"github.com/rollagent/rollagent/internal/testkit"
)

// Group makes a group name unique to this test process: managed containers
// are named after group and node, and names are global on a Docker engine,
// so two test runs on one machine must not share them.
func Group(name string) string { return name + "-" + dockertest.RunID()[:6] }

// Releases builds demoapp images, one per release name, once each.
type Releases struct {
	t      testing.TB
	cli    *client.Client
	prefix string // image repository, e.g. "rollagent-test/demoapp"
	tags   map[string]string
	// removals remove the images built, in NewReleases' cleanup.
	removals []func()
}

// NewReleases returns an empty set of releases tagged under repo. Their
// images are removed by a cleanup registered now, not as each is built:
// call it before registering what stops the agents that run them, so that
// it runs after, with no agent left to start their containers again.
func NewReleases(t testing.TB, cli *client.Client, repo string) *Releases {
	r := &Releases{t: t, cli: cli, prefix: repo, tags: map[string]string{}}
	t.Cleanup(func() {
		for i := len(r.removals) - 1; i >= 0; i-- {
			r.removals[i]()
		}
	})
	return r
}

// Image returns the tag of release, building it the first time with env
// added to the image (DEMOAPP_UNHEALTHY=1 makes a bad release).
func (r *Releases) Image(release string, env map[string]string) string {
	if tag, ok := r.tags[release]; ok {
		return tag
	}
	e := map[string]string{"DEMOAPP_VERSION": release}
	for k, v := range env {
		e[k] = v
	}
	tag := dockertest.BuildGoImage(r.t, r.cli, dockertest.GoImage{Package: "./internal/demoapp",
		Tag: r.prefix + ":" + release, Env: e, Healthcheck: []string{"/demoapp", "health"},
		Defer: func(remove func()) { r.removals = append(r.removals, remove) }})
	r.tags[release] = tag
	return tag
}

// SpecOptions shape a fast-rolling test spec.
type SpecOptions struct {
	Group, Image    string
	MaxParallel     int
	FailureAction   string
	MaxFailures     int
	HealthyDeadline time.Duration
	// Env is added to the container's environment: a value of its own
	// gives a spec a SHA of its own with the same image.
	Env map[string]string
	// ProbeTimeout and ProbeRetries default to 1s and 2. A cluster of
	// containers on a loaded machine needs more: Docker's exec of a probe
	// can take seconds there, and a probe timing out fails a good release.
	ProbeTimeout time.Duration
	ProbeRetries int
}

// Spec is a spec that checks health every 500ms and needs 1s of it.
func Spec(t testing.TB, o SpecOptions) *hashspec.Spec {
	t.Helper()
	env := ""
	if len(o.Env) > 0 {
		b, err := json.Marshal(o.Env)
		if err != nil {
			t.Fatal(err)
		}
		env = `"env":` + string(b) + ","
	}
	if o.ProbeTimeout == 0 {
		o.ProbeTimeout = time.Second
	}
	if o.ProbeRetries == 0 {
		o.ProbeRetries = 2
	}
	js := fmt.Sprintf(`{"name":%q,"container":{"image":%q,%s"healthcheck":{"test":["CMD","/demoapp","health"],
		"interval":"500ms","timeout":%q,"retries":%d}},"update":{"max_parallel":%d,"min_healthy_time":"1s",
		"healthy_deadline":%q,"failure_action":%q,"max_failures":%d}}`,
		o.Group, o.Image, env, o.ProbeTimeout.String(), o.ProbeRetries, o.MaxParallel, o.HealthyDeadline.String(), o.FailureAction, o.MaxFailures)
	s, _, err := hashspec.Load([]byte(js), hashspec.FormatJSON, "test spec")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Workload is what Docker says about one node's managed containers.
type Workload struct {
	SHAs    []string
	IDs     []string
	Running []string // IDs of the containers that run now
	Healthy bool     // the container under the managed name runs and is healthy
	Serving bool     // a container of the node runs and is healthy, under either name
	Managed string   // ID of the container under the managed name, or ""
	Status  []string // each container's name and Docker status, to say why it is not
}

// Workloads lists the managed containers of group that this test run made,
// by node.
func Workloads(t testing.TB, cli *client.Client, group string) map[string]Workload {
	t.Helper()
	out, err := ListWorkloads(cli, group)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// ListWorkloads is Workloads for a goroutine other than the test's, which
// must not call t.Fatal: it returns the error instead.
func ListWorkloads(cli *client.Client, group string) (map[string]Workload, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return ListWorkloadsContext(ctx, cli, group)
}

// ListWorkloadsContext is ListWorkloads bounded by ctx.
func ListWorkloadsContext(ctx context.Context, cli *client.Client, group string) (map[string]Workload, error) {
	args := filters.NewArgs(filters.Arg("label", agent.LabelGroup+"="+group), filters.Arg("label", dockertest.Label+"="+dockertest.RunID()))
	list, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: args})
	if err != nil {
		return nil, fmt.Errorf("list the workloads of %s: %w", group, err)
	}
	out := map[string]Workload{}
	for _, c := range list {
		n := c.Labels[agent.LabelNode]
		w := out[n]
		w.SHAs = append(w.SHAs, c.Labels[agent.LabelSHA])
		w.IDs = append(w.IDs, c.ID)
		if c.State == "running" {
			w.Running = append(w.Running, c.ID)
		}
		w.Status = append(w.Status, strings.Join(c.Names, ",")+": "+c.Status)
		managed := len(c.Names) > 0 && c.Names[0] == "/rollagent-"+group+"-"+n
		if managed {
			w.Managed = c.ID
		}
		healthy := c.State == "running" && strings.Contains(c.Status, "(healthy)")
		w.Healthy = w.Healthy || managed && healthy
		w.Serving = w.Serving || healthy
		out[n] = w
	}
	return out, nil
}

// Running says every node of nodes runs exactly one healthy container of sha.
func Running(ws map[string]Workload, nodes []string, sha string) bool {
	for _, n := range nodes {
		if w := ws[n]; len(w.SHAs) != 1 || w.SHAs[0] != sha || !w.Healthy {
			return false
		}
	}
	return true
}

// WaitFor polls cond every 200ms for at most d: a bounded wait, never a
// bare sleep.
func WaitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, d, what, cond)
}

// Poll is WaitFor that reports a timeout instead of failing the test, for a
// check that must go on to clean up, or a goroutine other than the test's.
func Poll(d time.Duration, cond func() bool) bool { return testkit.Poll(d, cond) }
