package hashspec

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

type validateCase struct {
	name  string
	mut   func(s *Spec)
	field string
}

func runValidateCases(t *testing.T, cases []validateCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := validSpec()
			tc.mut(&s)
			wantOnlyField(t, s.Validate(), tc.field)
		})
	}
}

func TestValidSpecIsValid(t *testing.T) {
	s := validSpec()
	if err := s.Validate(); err != nil {
		t.Fatalf("base spec for validation cases must be valid: %v", err)
	}
}

func TestValidateContainer(t *testing.T) {
	runValidateCases(t, []validateCase{
		{"bad name", func(s *Spec) { s.Name = "web." }, "name"},
		{"image missing", func(s *Spec) { s.Container.Image = "" }, "container.image"},
		{"image uppercase host", func(s *Spec) { s.Container.Image = "UPPER/case" }, "container.image"},
		{"image uppercase repo", func(s *Spec) { s.Container.Image = "Demo:v2" }, "container.image"},
		{"image space", func(s *Spec) { s.Container.Image = "a b" }, "container.image"},
		{"image tag only", func(s *Spec) { s.Container.Image = ":tag" }, "container.image"},
		{"cmd NUL", func(s *Spec) { s.Container.Cmd = []string{"a", "b\x00"} }, "container.cmd[1]"},
		{"entrypoint bad UTF-8", func(s *Spec) { s.Container.Entrypoint = []string{"\xff"} }, "container.entrypoint[0]"},
		{"env key digit first", func(s *Spec) { s.Container.Env = map[string]string{"1X": "v"} }, "container.env.1X"},
		{"env key dash", func(s *Spec) { s.Container.Env = map[string]string{"A-B": "v"} }, "container.env.A-B"},
		{"env value newline", func(s *Spec) { s.Container.Env["FOO"] = "a\nb" }, "container.env.FOO"},
		{"env value CR", func(s *Spec) { s.Container.Env["FOO"] = "a\rb" }, "container.env.FOO"},
		{"env value NUL", func(s *Spec) { s.Container.Env["FOO"] = "a\x00b" }, "container.env.FOO"},
		{"label reserved", func(s *Spec) { s.Container.Labels["rollagent.sha"] = "x" }, "container.labels.rollagent.sha"},
		{"label reserved any case", func(s *Spec) { s.Container.Labels["RollAgent.x"] = "x" }, "container.labels.RollAgent.x"},
		{"label empty key", func(s *Spec) { s.Container.Labels[""] = "x" }, `container.labels[""]`},
		{"label key NUL", func(s *Spec) { s.Container.Labels["a\x00"] = "x" }, `container.labels["a\x00"]`},
		{"label value NUL", func(s *Spec) { s.Container.Labels["team"] = "\x00" }, "container.labels.team"},
		{"restart unknown", func(s *Spec) { s.Container.Restart = "sometimes" }, "container.restart"},
		{"network mode container:", func(s *Spec) { s.Container.NetworkMode = "container:db" }, "container.network_mode"},
		{"pid mode private", func(s *Spec) { s.Container.PIDMode = "private" }, "container.pid_mode"},
	})
}

func TestValidatePorts(t *testing.T) {
	port := func(p Port) func(s *Spec) {
		return func(s *Spec) { s.Container.Ports = []Port{p} }
	}
	runValidateCases(t, []validateCase{
		{"host negative", port(Port{Host: -1, Container: 80, Protocol: "tcp"}), "container.ports[0].host"},
		{"host too big", port(Port{Host: 65536, Container: 80, Protocol: "tcp"}), "container.ports[0].host"},
		{"container zero", port(Port{Host: 80, Protocol: "tcp"}), "container.ports[0].container"},
		{"container too big", port(Port{Container: 70000, Protocol: "tcp"}), "container.ports[0].container"},
		{"protocol sctp", port(Port{Container: 80, Protocol: "sctp"}), "container.ports[0].protocol"},
		{"host ip invalid", port(Port{Host: 80, Container: 80, Protocol: "tcp", HostIP: "nope"}), "container.ports[0].host_ip"},
		{"host ip zone", port(Port{Host: 80, Container: 80, Protocol: "tcp", HostIP: "fe80::1%eth0"}), "container.ports[0].host_ip"},
		{"host ip unpublished", port(Port{Container: 80, Protocol: "tcp", HostIP: "127.0.0.1"}), "container.ports[0].host_ip"},
		{"duplicate host port", func(s *Spec) {
			s.Container.Ports = append(s.Container.Ports, Port{Host: 8080, Container: 9090, Protocol: "tcp", HostIP: "127.0.0.1"})
		}, "container.ports[1].host"},
		{"ports with host network", func(s *Spec) { s.Container.NetworkMode = "host" }, "container.ports"},
	})
}

func TestValidateVolumes(t *testing.T) {
	vol := func(v Volume) func(s *Spec) {
		return func(s *Spec) { s.Container.Volumes = []Volume{v} }
	}
	runValidateCases(t, []validateCase{
		{"source missing", vol(Volume{Type: "volume", Target: "/d"}), "container.volumes[0].source"},
		{"bind relative source", vol(Volume{Type: "bind", Source: "data", Target: "/d"}), "container.volumes[0].source"},
		{"volume with path source", vol(Volume{Type: "volume", Source: "/srv", Target: "/d"}), "container.volumes[0].source"},
		{"volume name too short", vol(Volume{Type: "volume", Source: "a", Target: "/d"}), "container.volumes[0].source"},
		{"source NUL", vol(Volume{Type: "bind", Source: "/a\x00", Target: "/d"}), "container.volumes[0].source"},
		{"type tmpfs", vol(Volume{Type: "tmpfs", Source: "x", Target: "/d"}), "container.volumes[0].type"},
		{"target missing", vol(Volume{Type: "volume", Source: "data"}), "container.volumes[0].target"},
		{"target relative", vol(Volume{Type: "volume", Source: "data", Target: "d"}), "container.volumes[0].target"},
		{"target unclean", vol(Volume{Type: "volume", Source: "data", Target: "/d/../e"}), "container.volumes[0].target"},
		{"target root", vol(Volume{Type: "volume", Source: "data", Target: "/"}), "container.volumes[0].target"},
		{"duplicate target", func(s *Spec) {
			s.Container.Volumes = append(s.Container.Volumes, Volume{Type: "volume", Source: "other", Target: "/data"})
		}, "container.volumes[1].target"},
	})
}

func TestValidateHealthcheck(t *testing.T) {
	hc := func(mut func(h *Healthcheck)) func(s *Spec) {
		return func(s *Spec) { mut(s.Container.Healthcheck) }
	}
	const f = "container.healthcheck."
	runValidateCases(t, []validateCase{
		{"test empty", hc(func(h *Healthcheck) { h.Test = nil }), f + "test"},
		{"test bad kind", hc(func(h *Healthcheck) { h.Test = []string{"RUN", "x"} }), f + "test[0]"},
		{"NONE with args", hc(func(h *Healthcheck) { h.Test = []string{"NONE", "x"} }), f + "test"},
		{"CMD without command", hc(func(h *Healthcheck) { h.Test = []string{"CMD"} }), f + "test"},
		{"CMD-SHELL two commands", hc(func(h *Healthcheck) { h.Test = []string{"CMD-SHELL", "a", "b"} }), f + "test"},
		{"test NUL", hc(func(h *Healthcheck) { h.Test = []string{"CMD", "a\x00"} }), f + "test[1]"},
		{"interval zero", hc(func(h *Healthcheck) { h.Interval = 0 }), f + "interval"},
		{"interval negative", hc(func(h *Healthcheck) { h.Interval = dur("-5s") }), f + "interval"},
		{"interval below docker minimum", hc(func(h *Healthcheck) { h.Interval = dur("500us") }), f + "interval"},
		{"timeout zero", hc(func(h *Healthcheck) { h.Timeout = 0 }), f + "timeout"},
		{"retries zero", hc(func(h *Healthcheck) { h.Retries = 0 }), f + "retries"},
		{"start period negative", hc(func(h *Healthcheck) { h.StartPeriod = dur("-1s") }), f + "start_period"},
		{"start period tiny", hc(func(h *Healthcheck) { h.StartPeriod = 1 }), f + "start_period"},
		{"interval over a day", hc(func(h *Healthcheck) { h.Interval = MaxDuration + 1 }), f + "interval"},
		{"timeout absurd", hc(func(h *Healthcheck) { h.Timeout = dur("2562047h47m") }), f + "timeout"},
		{"start period over a day", hc(func(h *Healthcheck) { h.StartPeriod = dur("25h") }), f + "start_period"},
	})
}

func TestValidateUpdate(t *testing.T) {
	up := func(mut func(u *Update)) func(s *Spec) {
		return func(s *Spec) { mut(&s.Update) }
	}
	runValidateCases(t, []validateCase{
		{"max parallel zero", up(func(u *Update) { u.MaxParallel = Count(0) }), "update.max_parallel"},
		{"max parallel negative", up(func(u *Update) { u.MaxParallel = Count(-2) }), "update.max_parallel"},
		{"min healthy zero", up(func(u *Update) { u.MinHealthyTime = 0 }), "update.min_healthy_time"},
		{"min healthy negative", up(func(u *Update) { u.MinHealthyTime = dur("-5s") }), "update.min_healthy_time"},
		{"deadline zero", up(func(u *Update) { u.HealthyDeadline = 0 }), "update.healthy_deadline"},
		{"deadline not after min", up(func(u *Update) { u.HealthyDeadline = u.MinHealthyTime }), "update.healthy_deadline"},
		{"deadline absurd", up(func(u *Update) { u.HealthyDeadline = dur("2562047h47m") }), "update.healthy_deadline"},
		{"deadline just over a day", up(func(u *Update) { u.HealthyDeadline = MaxDuration + 1 }), "update.healthy_deadline"},
		{"min healthy over a day", up(func(u *Update) {
			u.MinHealthyTime, u.HealthyDeadline = dur("25h"), MaxDuration
		}), "update.min_healthy_time"},
		{"failure action unknown", up(func(u *Update) { u.FailureAction = "explode" }), "update.failure_action"},
		{"max failures zero", up(func(u *Update) { u.MaxFailures = Count(0) }), "update.max_failures"},
		{"order unknown", up(func(u *Update) { u.Order = "sideways" }), "update.order"},
		{"start-first with host port", up(func(u *Update) { u.Order = OrderStartFirst }), "update.order"},
	})
}

// The largest durations a spec may hold are accepted, with a clear error
// one past them.
func TestDurationBounds(t *testing.T) {
	s := validSpec()
	s.Update.MinHealthyTime, s.Update.HealthyDeadline = MaxDuration-1, MaxDuration
	s.Container.Healthcheck.Interval, s.Container.Healthcheck.Timeout = MaxDuration, MaxDuration
	s.Container.Healthcheck.StartPeriod = MaxDuration
	if err := s.Validate(); err != nil {
		t.Fatalf("durations of at most %s refused: %v", MaxDuration, err)
	}
	s.Update.HealthyDeadline = dur("2562047h47m")
	want := "update.healthy_deadline: must be at most 24h0m0s, got 2562047h47m0s"
	if err := s.Validate(); err == nil || err.Error() != want {
		t.Fatalf("Validate = %v, want %q", err, want)
	}
}

// One Validate call must report every problem, not just the first.
func TestValidateReportsAll(t *testing.T) {
	s := validSpec()
	s.Container.Image = ""
	s.Update.MaxParallel = Count(0)
	err := s.Validate()
	var ve *ValidationError
	if !errors.As(err, &ve) || len(ve.Errors) != 2 {
		t.Fatalf("want a ValidationError with 2 entries, got %v", err)
	}
	want := "container.image: is required; update.max_parallel: must be at least 1, got 0"
	if err.Error() != want {
		t.Fatalf("message:\n got %q\nwant %q", err.Error(), want)
	}
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "container.image" {
		t.Fatalf("errors.As should reach the first FieldError, got %v", fe)
	}
}

func TestCheckCommitSize(t *testing.T) {
	for _, tc := range []struct {
		name string
		size int
		want bool // refused
	}{
		{"small", 100, false},
		{"at the limit", MaxCommitBytes, false},
		{"one byte over", MaxCommitBytes + 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckCommitSize(make([]byte, tc.size))
			if got := errors.Is(err, ErrTooLargeToCommit); got != tc.want {
				t.Fatalf("CheckCommitSize(%d bytes) = %v, want refused %v", tc.size, err, tc.want)
			}
			if err != nil && !strings.Contains(err.Error(), fmt.Sprintf("is %d bytes, over the %d", tc.size, MaxCommitBytes)) {
				t.Fatalf("error %q does not give both sizes", err)
			}
		})
	}
	if MaxCommitBytes*4/3 >= 512<<10 {
		t.Fatalf("MaxCommitBytes %d base64-encoded does not fit Consul's 512 KiB transaction", MaxCommitBytes)
	}
}

// An image in a registry named by host and port, as a private registry or
// a loopback one is, is valid (the nemesis pulls from one).
func TestValidateImageWithRegistryPort(t *testing.T) {
	for _, img := range []string{"127.0.0.1:5000/demo/app:gen-1", "registry.example:443/app@sha256:" + strings.Repeat("a", 64), "localhost:5000/app"} {
		t.Run(img, func(t *testing.T) {
			s := validSpec()
			s.Container.Image = img
			if err := s.Validate(); err != nil {
				t.Fatalf("%q: %v", img, err)
			}
		})
	}
}
