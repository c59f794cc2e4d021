package agent

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/go-connections/nat"
	"github.com/hashicorp/go-hclog"
	"github.com/rollagent/rollagent/hashspec"
)

const testSHA = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestContainerConfigBasics(t *testing.T) {
	spec := &hashspec.Spec{Name: "web", Container: hashspec.Container{
		Image: "example.com/web:1", Cmd: []string{"serve", "--x"}, Entrypoint: []string{"/app"},
		Env:     map[string]string{"B": "2", "A": "1", "C": "x=y", "AA": ""},
		Restart: "unless-stopped", Privileged: true, NetworkMode: "host", PIDMode: "host",
	}}
	cfg, host, err := containerConfig(spec, testSHA, "web", "n1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"A=1", "AA=", "B=2", "C=x=y"}; !reflect.DeepEqual(cfg.Env, want) {
		t.Errorf("Env = %q, want %q (sorted, so the same spec creates the same container)", cfg.Env, want)
	}
	if cfg.Image != "example.com/web:1" || !reflect.DeepEqual([]string(cfg.Cmd), spec.Container.Cmd) ||
		!reflect.DeepEqual([]string(cfg.Entrypoint), spec.Container.Entrypoint) {
		t.Errorf("image/cmd/entrypoint = %q %q %q", cfg.Image, cfg.Cmd, cfg.Entrypoint)
	}
	if host.RestartPolicy.Name != container.RestartPolicyUnlessStopped || !host.Privileged ||
		host.NetworkMode != "host" || host.PidMode != "host" {
		t.Errorf("host config = %+v", host)
	}
	if cfg.Healthcheck != nil || cfg.ExposedPorts != nil || host.PortBindings != nil || host.Mounts != nil {
		t.Errorf("a spec without healthcheck, ports or volumes set some: %+v %+v", cfg, host)
	}
}

// The agent's own labels are how a restarted agent finds its workload and
// its SHA, so neither the spec (which Validate already refuses) nor the
// operator's --label can override them; other labels pass through, and the
// operator's win over the spec's.
func TestContainerConfigLabels(t *testing.T) {
	spec := &hashspec.Spec{Container: hashspec.Container{Image: "web:1", Labels: map[string]string{
		"team": "dev", "app": "web", LabelSHA: "forged", LabelNode: "other", "rollagent.extra": "spec",
	}}}
	extra := map[string]string{"team": "ops", "rollagent.test": "run1", LabelGroup: "other", LabelManaged: "false"}
	cfg, _, err := containerConfig(spec, testSHA, "web", "n1", extra)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"team": "ops", "app": "web", "rollagent.extra": "spec", "rollagent.test": "run1",
		LabelManaged: "true", LabelGroup: "web", LabelNode: "n1", LabelSHA: testSHA,
	}
	if !reflect.DeepEqual(cfg.Labels, want) {
		t.Errorf("Labels =\n%v\nwant\n%v", cfg.Labels, want)
	}
	if _, ok := spec.Container.Labels[LabelManaged]; ok {
		t.Error("containerConfig wrote into the spec's label map")
	}
}

func TestContainerConfigHealthcheck(t *testing.T) {
	spec := &hashspec.Spec{Container: hashspec.Container{Image: "web:1", Healthcheck: &hashspec.Healthcheck{
		Test: []string{"CMD", "/app", "health"}, Interval: hashspec.Duration(500 * time.Millisecond),
		Timeout: hashspec.Duration(time.Second), Retries: 2, StartPeriod: hashspec.Duration(3 * time.Second),
	}}}
	cfg, _, err := containerConfig(spec, testSHA, "web", "n1", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := &container.HealthConfig{Test: []string{"CMD", "/app", "health"}, Interval: 500 * time.Millisecond,
		Timeout: time.Second, Retries: 2, StartPeriod: 3 * time.Second}
	if !reflect.DeepEqual(cfg.Healthcheck, want) {
		t.Errorf("Healthcheck = %+v, want %+v", cfg.Healthcheck, want)
	}
}

func TestContainerConfigPortsAndVolumes(t *testing.T) {
	spec := &hashspec.Spec{Container: hashspec.Container{Image: "web:1",
		Ports: []hashspec.Port{
			{Host: 8080, Container: 80, Protocol: "tcp", HostIP: "127.0.0.1"},
			{Host: 8081, Container: 80, Protocol: "tcp"},
			{Container: 9090, Protocol: "tcp"},
			{Host: 5353, Container: 53, Protocol: "udp"},
		},
		Volumes: []hashspec.Volume{
			{Type: "bind", Source: "/srv/data", Target: "/data", ReadOnly: true},
			{Type: "volume", Source: "cache", Target: "/cache"},
		},
	}}
	cfg, host, err := containerConfig(spec, testSHA, "web", "n1", nil)
	if err != nil {
		t.Fatal(err)
	}
	wantExposed := nat.PortSet{"80/tcp": {}, "9090/tcp": {}, "53/udp": {}}
	if !reflect.DeepEqual(cfg.ExposedPorts, wantExposed) {
		t.Errorf("ExposedPorts = %v, want %v", cfg.ExposedPorts, wantExposed)
	}
	wantBindings := nat.PortMap{
		"80/tcp": {{HostIP: "127.0.0.1", HostPort: "8080"}, {HostPort: "8081"}},
		"53/udp": {{HostPort: "5353"}},
	}
	if !reflect.DeepEqual(host.PortBindings, wantBindings) {
		t.Errorf("PortBindings = %v, want %v (an unpublished port is exposed, not bound)", host.PortBindings, wantBindings)
	}
	wantMounts := []mount.Mount{
		{Type: mount.TypeBind, Source: "/srv/data", Target: "/data", ReadOnly: true},
		{Type: mount.TypeVolume, Source: "cache", Target: "/cache"},
	}
	if !reflect.DeepEqual(host.Mounts, wantMounts) {
		t.Errorf("Mounts = %+v, want %+v", host.Mounts, wantMounts)
	}
}

func TestContainerConfigBadPort(t *testing.T) {
	spec := &hashspec.Spec{Container: hashspec.Container{Image: "web:1",
		Ports: []hashspec.Port{{Host: 1, Container: 70000, Protocol: "tcp"}}}}
	if _, _, err := containerConfig(spec, testSHA, "web", "n1", nil); err == nil || !strings.Contains(err.Error(), "70000") {
		t.Fatalf("err = %v, want one naming port 70000", err)
	}
}

func running(health *container.Health) container.InspectResponse {
	return container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{
		State: &container.State{Status: "running", Running: true, Health: health}}}
}

func TestHealthNow(t *testing.T) {
	long := strings.Repeat("x", 300)
	probe := func(code int, out string) []*container.HealthcheckResult {
		return []*container.HealthcheckResult{{ExitCode: 0, Output: "ok"}, {ExitCode: code, Output: out}}
	}
	tests := []struct {
		name string
		insp container.InspectResponse
		ok   bool
		why  string
	}{
		{"no state", container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{}}, false, "no state"},
		{"exited", container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{
			State: &container.State{Status: "exited", ExitCode: 3}}}, false, "exited (exit code 3)"},
		{"running without a healthcheck", running(nil), true, "running"},
		{"healthy", running(&container.Health{Status: container.Healthy}), true, "running"},
		{"starting", running(&container.Health{Status: container.Starting}), false, "health: starting"},
		{"unhealthy with its last probe", running(&container.Health{Status: container.Unhealthy, Log: probe(1, "boom")}),
			false, "health: unhealthy (last probe exit 1: boom)"},
		{"the probe's trailing newline is dropped", running(&container.Health{Status: container.Unhealthy, Log: probe(1, "boom\n")}),
			false, "health: unhealthy (last probe exit 1: boom)"},
		{"long probe output is clipped", running(&container.Health{Status: container.Unhealthy, Log: probe(2, long)}),
			false, "health: unhealthy (last probe exit 2: " + long[:200] + ")"},
		// Docker reports a container that crash-loops under a restart
		// policy as Running while it waits to restart it.
		{"restarting", container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{
			State: &container.State{Status: "restarting", Running: true, Restarting: true, ExitCode: 3}}},
			false, "restarting (exit code 3)"},
		{"restarting with a stale healthy status", container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{
			State: &container.State{Status: "restarting", Running: true, Restarting: true, ExitCode: 1,
				Health: &container.Health{Status: container.Healthy}}}}, false, "restarting (exit code 1)"},
		{"paused", container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{
			State: &container.State{Status: "paused", Running: true, Paused: true,
				Health: &container.Health{Status: container.Healthy}}}}, false, "paused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ok, why := healthNow(tt.insp)
			if ok != tt.ok || why != tt.why {
				t.Errorf("healthNow = %v, %q; want %v, %q", ok, why, tt.ok, tt.why)
			}
		})
	}
}

// inspectOnly is a DockerAPI whose ContainerInspect always answers the same;
// any other call panics on the nil embedded interface.
type inspectOnly struct {
	DockerAPI
	resp container.InspectResponse
}

func (f inspectOnly) ContainerInspect(context.Context, string) (container.InspectResponse, error) {
	return f.resp, nil
}

// A release that exits at once, under the default restart policy and with
// no healthcheck, is what Docker shows as "restarting" (Running true) between
// its restarts: WaitHealthy must fail it, not count it healthy.
func TestWaitHealthyFailsACrashLoopingContainer(t *testing.T) {
	resp := container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{
		State: &container.State{Status: "restarting", Running: true, Restarting: true, ExitCode: 3}}}
	d := NewDocker(inspectOnly{resp: resp}, "web", "n1", nil, hclog.NewNullLogger())
	spec := &hashspec.Spec{Update: hashspec.Update{MinHealthyTime: hashspec.Duration(300 * time.Millisecond),
		HealthyDeadline: hashspec.Duration(5 * time.Second)}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Failing at healthy_deadline would say "within healthy_deadline"; the
	// message tells that it failed on the restart itself.
	err := d.WaitHealthy(ctx, spec)
	if err == nil || !strings.Contains(err.Error(), "restarting (exit code 3)") || strings.Contains(err.Error(), "healthy_deadline") {
		t.Fatalf("WaitHealthy = %v, want a failure naming the restart", err)
	}
}
