package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	"github.com/docker/go-connections/nat"
	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/dockertest"
	"github.com/rollagent/rollagent/internal/fleettest"
)

// cluster is 3 Consul servers and a fleet of nodes on a private Docker
// network. Each node is a Consul client agent container plus a rollagent
// container in its network namespace, talking to it on localhost, as in a
// real deployment. Workloads are sibling containers the agents manage
// through the host's Docker socket.
type cluster struct {
	t        *testing.T
	docker   *client.Client
	netName  string
	subnet   string // the network's first three octets, "172.29.N."
	hosts    int    // addresses handed out so far
	prefix   string // container name prefix, unique per run
	consul   string // image tags
	agent    string
	servers  []string          // container names
	ports    map[string]string // server -> published HTTP address on loopback
	nodes    map[string]string // node -> group
	releases *fleettest.Releases
	built    []string // images this file built, removed at the end

	mu      sync.Mutex
	clients map[string]*api.Client // by server, see api
	booted  map[string][]string    // killed node -> workload containers its boot starts

	reg   *pullRegistry // the nemesis's image registry, started on first use
	pulls *pulls        // the nemesis's commits from it

	nemesisGen int // nemesis commits so far, over every seed of the run: each a SHA of its own

	verdicts []string // the nemesis's result per seed, printed again at the very end of a failed run
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	cli := dockertest.Client(t)
	bin, err := consultest.Binary()
	if err != nil {
		consultest.Unavailable(t, "consul: %v", err)
	}
	c := &cluster{t: t, docker: cli, prefix: "rit-" + dockertest.RunID()[:8], ports: map[string]string{},
		nodes: map[string]string{}, clients: map[string]*api.Client{}, booted: map[string][]string{}}
	c.releases = fleettest.NewReleases(t, cli, "rollagent-it/demoapp")
	t.Cleanup(c.removeImages) // registered first, so it runs after the containers are gone
	dockertest.Cleanup(t, cli)
	c.consul = c.buildImage("consul", bin)
	// With the test clock: the nemesis skews each host's (nemesis_skew_test.go).
	c.agent = c.buildImage("rollagent", dockertest.BuildBinaryTags(t, "./cmd/rollagent", testClockTag))
	c.netName = c.prefix + "-net"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c.createNetwork(ctx)
	for i := 1; i <= 3; i++ {
		c.startServer(fmt.Sprintf("%s-s%d", c.prefix, i))
	}
	c.waitFor(2*time.Minute, "a leader and 3 servers", func() bool {
		peers, err := c.api().Status().Peers()
		return err == nil && len(peers) == 3
	})
	return c
}

func (c *cluster) buildImage(name, binary string) string {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	tag := fmt.Sprintf("rollagent-it/%s:%s", name, dockertest.RunID()[:8])
	df := fmt.Sprintf("FROM scratch\nCOPY %s /%s\nENTRYPOINT [\"/%s\"]\n", name, name, name)
	start := time.Now()
	if err := dockertest.ImageFromBinaries(ctx, c.docker, tag, map[string]string{"/" + name: binary}, df, dockertest.Labels()); err != nil {
		c.t.Fatalf("build %s: %v", tag, err)
	}
	c.t.Logf("built image %s in %s", tag, time.Since(start).Round(time.Millisecond))
	c.built = append(c.built, tag)
	return tag
}

// createNetwork makes the cluster's network with a subnet of its own, so
// that every host on it gets a fixed address (see run). Subnets already
// taken are skipped.
func (c *cluster) createNetwork(ctx context.Context) {
	c.t.Helper()
	var err error
	for i := 0; i < 20; i++ {
		base := fmt.Sprintf("172.29.%d.", rand.IntN(250)+1)
		ipam := &network.IPAM{Config: []network.IPAMConfig{{Subnet: base + "0/24"}}}
		if _, err = c.docker.NetworkCreate(ctx, c.netName, network.CreateOptions{Labels: dockertest.Labels(), IPAM: ipam}); err == nil {
			c.subnet = base
			return
		}
	}
	c.t.Fatalf("create network: %v", err)
}

func (c *cluster) removeImages() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tag := range c.built {
		if _, err := c.docker.ImageRemove(ctx, tag, image.RemoveOptions{Force: true, PruneChildren: true}); err != nil {
			c.t.Logf("remove image %s: %v", tag, err)
		}
	}
}

// joinArgs makes an agent retry-join every server by its container name,
// and keeps it from checking for updates: a test's traffic stays within
// its own containers.
func (c *cluster) joinArgs() []string {
	a := []string{"-hcl=disable_update_check = true"}
	for i := 1; i <= 3; i++ {
		a = append(a, fmt.Sprintf("-retry-join=%s-s%d", c.prefix, i))
	}
	return a
}

func (c *cluster) startServer(name string) {
	c.t.Helper()
	port := freePort(c.t)
	cmd := append([]string{"agent", "-server", "-bootstrap-expect=3", "-node=" + name, "-data-dir=/data",
		"-bind={{ GetInterfaceIP \"eth0\" }}", "-client=0.0.0.0", "-dns-port=-1", "-grpc-port=-1",
		"-hcl=performance { raft_multiplier = 1 }"}, c.joinArgs()...)
	cfg := &container.Config{Image: c.consul, Cmd: cmd, Labels: dockertest.Labels(),
		ExposedPorts: nat.PortSet{"8500/tcp": {}}}
	host := &container.HostConfig{PortBindings: nat.PortMap{"8500/tcp": {{HostIP: "127.0.0.1", HostPort: strconv.Itoa(port)}}}}
	c.run(name, cfg, host, true)
	c.servers = append(c.servers, name)
	c.ports[name] = "127.0.0.1:" + strconv.Itoa(port)
}

// run creates and starts a container, on the cluster network when onNet.
// A host on the network gets a fixed address, as a server's would be: its
// Consul agent is bound to it, a partitioned host is reconnected with it,
// and Docker never hands it to another container while it is stopped or
// cut off, which a dynamic address on a small subnet it would.
func (c *cluster) run(name string, cfg *container.Config, host *container.HostConfig, onNet bool) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var nc *network.NetworkingConfig
	if onNet {
		c.hosts++
		ip := c.subnet + strconv.Itoa(10+c.hosts)
		host.NetworkMode = container.NetworkMode(c.netName)
		nc = &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{
			c.netName: {IPAMConfig: &network.EndpointIPAMConfig{IPv4Address: ip}}}}
	}
	created, err := c.docker.ContainerCreate(ctx, cfg, host, nc, nil, name)
	if err != nil {
		c.t.Fatalf("create %s: %v", name, err)
	}
	if err := c.docker.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		c.t.Fatalf("start %s: %v", name, err)
	}
}

// api returns a client for the first server that answers. Clients are made
// once per server and reused: each has its own connection pool, and a new
// one per call piles up idle connections until Consul answers 429.
func (c *cluster) api() *api.Client {
	for _, s := range c.servers {
		cl := c.client(s)
		if leader, err := cl.Status().Leader(); err == nil && leader != "" {
			return cl
		}
	}
	return c.client(c.servers[0])
}

func (c *cluster) client(server string) *api.Client {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl, ok := c.clients[server]; ok {
		return cl
	}
	cfg := api.DefaultConfig()
	cfg.Address = c.ports[server]
	cfg.WaitTime = 10 * time.Second
	cl, err := api.NewClient(cfg)
	if err != nil {
		c.t.Fatalf("consul client for %s: %v", server, err)
	}
	c.clients[server] = cl
	return cl
}

// waitFor polls cond for at most d.
func (c *cluster) waitFor(d time.Duration, what string, cond func() bool) {
	c.t.Helper()
	fleettest.WaitFor(c.t, d, what, cond)
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
