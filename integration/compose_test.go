package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/dockertest"
	"github.com/rollagent/rollagent/internal/fleettest"
)

const composeDir = "../docs/examples/compose"

// composeExample runs the documented Compose fleet as a user would, with
// this run's images in place of the ones `make compose-images` builds,
// and rolls the documented specs v1 then v2 through it.
func (c *cluster) composeExample(t *testing.T) {
	bin, err := exec.LookPath("docker-compose")
	if err != nil {
		consultest.Unavailable(t, "docker-compose: %v", err)
	}
	group, port, project := fleettest.Group("compose"), freePort(t), c.prefix+"-compose"
	env := append(os.Environ(), "ROLLAGENT_IMAGE="+c.agent, "CONSUL_IMAGE="+c.consul,
		"CONSUL_PORT="+strconv.Itoa(port), "ROLLAGENT_GROUP="+group,
		"ROLLAGENT_LABEL="+dockertest.Label+"="+dockertest.RunID())
	compose := func(d time.Duration, args ...string) error {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, append([]string{"-p", project, "-f", filepath.Join(composeDir, "docker-compose.yml")}, args...)...)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("docker-compose %v: %v\n%s", args, err, out)
		}
		return nil
	}
	t.Cleanup(func() {
		if err := compose(2*time.Minute, "down", "-v", "--remove-orphans", "-t", "5"); err != nil {
			t.Log(err)
		}
		c.removeProject(project)
	})
	if err := compose(3*time.Minute, "up", "-d"); err != nil {
		t.Fatal(err)
	}
	cfg := api.DefaultConfig()
	cfg.Address = "127.0.0.1:" + strconv.Itoa(port)
	client, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.waitFor(time.Minute, "the Compose Consul to elect itself", func() bool {
		leader, err := client.Status().Leader()
		return err == nil && leader != ""
	})
	st := coordinator.NewStore(client, "")
	nodes := []string{"node-1", "node-2", "node-3"}
	for _, rel := range []string{"v1", "v2"} {
		sha := c.commitExample(t, st, group, rel)
		c.waitFor(3*time.Minute, "the Compose fleet on "+rel, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			gs, err := st.Read(ctx, group, nil)
			return err == nil && gs.Progress().Done && len(gs.Nodes) == len(nodes) &&
				fleettest.Running(fleettest.Workloads(t, c.docker, group), nodes, sha)
		})
	}
}

// commitExample commits docs/examples/compose/web-<rel>.hcl as written,
// but for this run's group and image.
func (c *cluster) commitExample(t *testing.T, st *coordinator.Store, group, rel string) string {
	t.Helper()
	spec, err := hashspec.ParseFile(filepath.Join(composeDir, "web-"+rel+".hcl"))
	if err != nil {
		t.Fatalf("the documented spec does not parse: %v", err)
	}
	spec.Name, spec.Container.Image = group, c.releases.Image(rel, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := st.Commit(ctx, group, spec, "integration", "commit")
	if err != nil {
		t.Fatal(err)
	}
	return res.SHA
}

// removeProject removes what `down` left of a Compose project, for a run
// that failed half-way.
func (c *cluster) removeProject(project string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f := filters.NewArgs(filters.Arg("label", "com.docker.compose.project="+project))
	cs, err := c.docker.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		c.t.Logf("list compose containers: %v", err)
		return
	}
	for _, ct := range cs {
		_ = c.docker.ContainerRemove(ctx, ct.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
	}
	_ = c.docker.NetworkRemove(ctx, project+"_default")
}
