package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/rollagent/rollagent/internal/dockertest"
)

// Image tags the Compose example (docs/examples/compose) runs by default.
const (
	agentImage  = "rollagent/rollagent:dev"
	consulImage = "rollagent/consul:1.13.9"
)

// images builds, FROM scratch and without any registry, what the Compose
// example needs: the agent, the Consul server and the demo web releases.
// They carry the demo label, so `make demo-down` removes them too.
func images(ctx context.Context, consulBin, bin string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cli, err := dockertest.Connect(ctx)
	if err != nil {
		return fmt.Errorf("the Compose example needs Docker: %w", err)
	}
	defer cli.Close()
	for tag, b := range map[string]struct{ name, path string }{
		agentImage:  {"rollagent", bin},
		consulImage: {"consul", consulBin},
	} {
		df := fmt.Sprintf("FROM scratch\nCOPY %s /%s\nENTRYPOINT [\"/%s\"]\n", b.name, b.name, b.name)
		if err := dockertest.ImageFromBinaries(ctx, cli, tag, map[string]string{"/" + b.name: b.path}, df,
			map[string]string{demoLabel: "1"}); err != nil {
			return fmt.Errorf("build %s: %w", tag, err)
		}
		say("built image %s (FROM scratch, nothing pulled)", tag)
	}
	if err := os.MkdirAll(stateDir(), 0o700); err != nil {
		return err
	}
	if _, runtime, err := prepareWorkloads(ctx); err != nil {
		return fmt.Errorf("demo web images: %w", err)
	} else if runtime != "docker" {
		return fmt.Errorf("demo web images: Docker went away")
	}
	say("next: docker-compose -f docs/examples/compose/docker-compose.yml up -d")
	return nil
}
