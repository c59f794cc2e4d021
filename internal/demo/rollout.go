package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/dockertest"
)

var releases = []string{"v1", "v2"}

// prepareWorkloads builds a FROM-scratch image per release, or says why it
// falls back to the exec runtime.
func prepareWorkloads(ctx context.Context) (map[string]string, string, error) {
	images := map[string]string{"v1": "rollagent-demo/web:v1", "v2": "rollagent-demo/web:v2"}
	cli, err := dockertest.Connect(ctx)
	if err != nil {
		say("Docker is not reachable (%v): falling back to the exec runtime, whose hooks install a file", err)
		return images, "exec", nil
	}
	defer cli.Close()
	bin := filepath.Join(stateDir(), "demoapp")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, "./internal/demoapp")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return nil, "", fmt.Errorf("build demoapp: %v: %s", err, out)
	}
	for _, r := range releases {
		df := fmt.Sprintf("FROM scratch\nCOPY demoapp /demoapp\nENTRYPOINT [\"/demoapp\"]\n"+
			"HEALTHCHECK --interval=1s --timeout=1s --retries=2 CMD [\"/demoapp\",\"health\"]\nENV DEMOAPP_VERSION=%s\n", r)
		if err := dockertest.ImageFromBinaries(ctx, cli, images[r], map[string]string{"/demoapp": bin}, df,
			map[string]string{demoLabel: "1"}); err != nil {
			return nil, "", err
		}
		say("built image %s (FROM scratch, nothing pulled)", images[r])
	}
	return images, "docker", nil
}

// specFile writes release's spec; canaries is its update.canary.
func specFile(release, img string, canaries int) (string, error) {
	js := fmt.Sprintf(`{"name":%q,"container":{"image":%q,"env":{"RELEASE":%q},
  "healthcheck":{"test":["CMD","/demoapp","health"],"interval":"1s","timeout":"1s","retries":2}},
 "update":{"max_parallel":1,"min_healthy_time":"2s","healthy_deadline":"1m","failure_action":"pause","max_failures":1,"canary":%d}}`,
		group, img, release, canaries)
	path := filepath.Join(stateDir(), release+".json")
	return path, os.WriteFile(path, []byte(js), 0o600)
}

// rollout commits a release with the CLI and follows it to the end; with
// kill, the release has a canary: it SIGKILLs the agent holding the slot
// (the canary's) mid-rollout and restarts it, and promotes the rest once
// the canary converged.
func rollout(ctx context.Context, bin string, st *state, store *coordinator.Store, images map[string]string, kill bool) error {
	release, canaries := releases[0], 0
	if kill {
		release, canaries = releases[1], 1
	}
	path, err := specFile(release, images[release], canaries)
	if err != nil {
		return err
	}
	say("rollagent commit %s -f %s", group, path)
	out, err := exec.CommandContext(ctx, bin, "--consul-addr="+st.HTTPAddr, "commit", group, "-f", path).CombinedOutput()
	fmt.Print(string(out))
	if err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	sha := strings.SplitN(string(out), "\n", 2)[0]
	if kill {
		if err := killHolder(ctx, bin, st, store); err != nil {
			return err
		}
		if err := promote(ctx, bin, st, store); err != nil {
			return err
		}
	}
	return follow(ctx, store, sha)
}

// promote waits, at most 5 minutes, for the canary to converge and the
// rest to await promotion, and promotes them with the CLI.
func promote(ctx context.Context, bin string, st *state, store *coordinator.Store) error {
	for deadline := time.Now().Add(5 * time.Minute); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(300 * time.Millisecond) {
		gs, err := store.Read(ctx, group, nil)
		if err != nil || gs.Gate().State != coordinator.GateAwaitingPromotion {
			continue
		}
		say("%s; the others wait for a promotion", gs.Gate().Reason)
		say("rollagent promote %s --reason \"the canary is healthy\"", group)
		out, err := exec.CommandContext(ctx, bin, "--consul-addr="+st.HTTPAddr, "promote", group, "--reason=the canary is healthy").CombinedOutput()
		fmt.Print(string(out))
		return err
	}
	return fmt.Errorf("the canary did not converge in 5 minutes; see the logs in %s", stateDir())
}

func killHolder(ctx context.Context, bin string, st *state, store *coordinator.Store) error {
	for i := 0; i < 300 && ctx.Err() == nil; i++ {
		if node := holder(ctx, store); node != "" {
			_ = syscall.Kill(st.Agents[node], syscall.SIGKILL)
			say("SIGKILLed the agent of %s while it held the slot: watch the rollout resume", node)
			time.Sleep(time.Second)
			say("restarting the agent of %s, as systemd would", node)
			return startAgent(bin, node, st)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("no agent took the slot within 30s; see the logs in %s", stateDir())
}

// follow prints progress until every node runs sha, for at most 5 minutes.
func follow(ctx context.Context, store *coordinator.Store, sha string) error {
	last := ""
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		gs, err := store.Read(ctx, group, nil)
		if err == nil {
			p := gs.Progress()
			line := fmt.Sprintf("%d/%d on %s, %d replacing, %d verifying, holder: %s", p.Converged, fleetSize, sha[:12], p.Replacing, p.Verifying, orNone(holderOf(gs)))
			if line != last {
				say("%s", line)
				last = line
			}
			if p.Done && p.Converged == fleetSize {
				return nil
			}
		}
		time.Sleep(300 * time.Millisecond)
	}
	return fmt.Errorf("rollout to %s did not finish in 5 minutes; see the logs in %s", sha[:12], stateDir())
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func printNext(st *state) {
	fmt.Printf(`
The demo is running: a Consul dev agent and %d agents (%s runtime).

  Consul UI:   http://%s/ui/   (Services: rollagent-%s; Key/Value: rollagent/)
  Logs:        %s

Try next:
  export CONSUL_HTTP_ADDR=%s
  bin/rollagent status %s --watch
  bin/rollagent commit %s -f %s      # back to v1: a new rollout
  bin/rollagent cancel %s            # stop it where it is
  make demo-down                     # remove everything
`, fleetSize, st.Runtime, st.HTTPAddr, group, stateDir(), st.HTTPAddr, group, group,
		filepath.Join(stateDir(), "v1.json"), group)
}

// removeDocker removes the demo's containers and images.
func removeDocker(ctx context.Context) error {
	cli, err := dockertest.Connect(ctx)
	if err != nil {
		return nil // nothing of ours can be there
	}
	defer cli.Close()
	f := filters.NewArgs(filters.Arg("label", demoLabel+"=1"))
	list, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return err
	}
	for _, c := range list {
		_ = cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
	}
	imgs, err := cli.ImageList(ctx, image.ListOptions{Filters: f})
	if err != nil {
		return err
	}
	for _, im := range imgs {
		_, _ = cli.ImageRemove(ctx, im.ID, image.RemoveOptions{Force: true, PruneChildren: true})
	}
	say("removed %d demo containers and %d images", len(list), len(imgs))
	return nil
}
