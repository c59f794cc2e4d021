package dockertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/client"
)

// Label marks every container, network and image that a test creates; its
// value is the RunID of the test process that made it.
const Label = "rollagent.test"

var runID = sync.OnceValue(func() string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return hex.EncodeToString(b)
})

// RunID is one random ID per test process. Scoping labels by it lets
// concurrent `go test` processes (one per package) clean up without touching
// each other's containers.
func RunID() string { return runID() }

// Labels returns a fresh {Label: RunID()} map for a ContainerCreate or
// NetworkCreate call, so Cleanup finds what the test made.
func Labels() map[string]string { return map[string]string{Label: RunID()} }

// Connect dials the engine from the environment (DOCKER_HOST and friends)
// and pings it. Version negotiation matters: the engines here speak API 1.41,
// older than this client's default. The ping fixes the version before the
// client is shared: left to the first requests, two at once race on it
// (see agent.DialDocker).
func Connect(ctx context.Context) (*client.Client, error) {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, err
	}
	ping, err := cli.Ping(ctx)
	if err != nil {
		cli.Close()
		return nil, err
	}
	cli.NegotiateAPIVersionPing(ping)
	return cli, nil
}

// Client connects to Docker for the test and closes the client on cleanup.
// When Docker is unreachable the test is skipped, except under CI=true, where
// it fails: CI must never pass because Docker was missing.
func Client(t testing.TB) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cli, err := Connect(ctx)
	if err != nil {
		msg := fmt.Sprintf("docker is unreachable: %v", err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg + " (CI=true: failing instead of skipping)")
		}
		t.Skip(msg)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}
