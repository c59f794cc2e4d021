package dockertest

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
)

func TestDockerfile(t *testing.T) {
	o := GoImage{
		Package:           "./internal/demoapp",
		Env:               map[string]string{"DEMOAPP_VERSION": "v2", "B": `a "b" $C \d <&>`},
		Cmd:               []string{"serve"},
		Healthcheck:       []string{"CMD", "/demoapp", "health"},
		HealthStartPeriod: 5 * time.Second,
		ExtraFiles:        map[string][]byte{"/etc/ssl/ca.pem": nil},
	}
	got, err := o.Dockerfile()
	if err != nil {
		t.Fatal(err)
	}
	want := `FROM scratch
COPY demoapp /demoapp
COPY etc/ssl/ca.pem /etc/ssl/ca.pem
ENTRYPOINT ["/demoapp"]
CMD ["serve"]
HEALTHCHECK --interval=1s --timeout=1s --retries=2 --start-period=5s CMD ["/demoapp","health"]
ENV B="a \"b\" \$C \\d <&>" DEMOAPP_VERSION="v2"
`
	if got != want {
		t.Errorf("Dockerfile:\n%s\nwant:\n%s", got, want)
	}
}

func TestDockerfileRejects(t *testing.T) {
	tests := []struct {
		name string
		o    GoImage
		want string
	}{
		{"newline in env", GoImage{Binary: "x", Env: map[string]string{"A": "1\n2"}}, "line break"},
		{"bad env name", GoImage{Binary: "x", Env: map[string]string{"A B": "1"}}, "not usable"},
		{"binary named Dockerfile", GoImage{Binary: "Dockerfile"}, "clash"},
		{"extra file at root", GoImage{Binary: "x", ExtraFiles: map[string][]byte{"/": nil}}, "root"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.o.Dockerfile()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want it to mention %q", err, tt.want)
			}
		})
	}
}

func TestUniqueTag(t *testing.T) {
	tests := []struct{ tag, binary, wantPrefix string }{
		{"rollagent-test/demoapp:v1", "demoapp", "rollagent-test/demoapp:v1-"},
		{"rollagent-test/demoapp", "demoapp", "rollagent-test/demoapp:latest-"},
		{"localhost:5000/demoapp", "demoapp", "localhost:5000/demoapp:latest-"},
		{"", "DemoApp", "rollagent-test/demoapp:latest-"},
	}
	seen := map[string]bool{}
	for _, tt := range tests {
		got := uniqueTag(tt.tag, tt.binary)
		if !strings.HasPrefix(got, tt.wantPrefix+RunID()+"-") {
			t.Errorf("uniqueTag(%q) = %q, want prefix %q+RunID", tt.tag, got, tt.wantPrefix)
		}
		if seen[got] {
			t.Errorf("uniqueTag repeated %q", got)
		}
		seen[got] = true
	}
	long := uniqueTag("r:"+strings.Repeat("x", 200), "x")
	if tag := long[strings.LastIndex(long, ":")+1:]; len(tag) > 128 {
		t.Errorf("tag part is %d chars, Docker allows 128", len(tag))
	}
}

func TestTarContext(t *testing.T) {
	r, err := tarContext(map[string]string{"/a/b/../c": "unit_test.go"}, "FROM scratch\n")
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(r)
	var names []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
	}
	if got := strings.Join(names, " "); got != "Dockerfile a/c" {
		t.Errorf("context holds %q, want Dockerfile and a/c", got)
	}
	if _, err := tarContext(map[string]string{"/x": "no-such-file"}, ""); err == nil {
		t.Error("a missing host file built a context")
	}
}

func TestReadBuildStream(t *testing.T) {
	tests := []struct {
		name, stream, wantErr string
	}{
		{"legacy success", `{"stream":"Step 1/2 : FROM scratch\n"}{"aux":{"ID":"sha256:ab"}}{"stream":"Successfully built ab\n"}`, ""},
		{"success without aux", `{"stream":"Successfully built ab\n"}`, ""},
		{"errorDetail", `{"stream":"Step 2/2 : COPY x /x\n"}{"errorDetail":{"message":"COPY failed: no x"},"error":"COPY failed: no x"}`, "COPY failed: no x\nbuild output (tail):\n  Step 2/2 : COPY x /x"},
		{"error only", `{"error":"old daemon says no"}`, "old daemon says no"},
		{"cut short", `{"stream":"Step 1/2 : FROM scratch\n"}`, "ended without success"},
		{"garbage", `{"stream":`, "reading build output"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := readBuildStream(strings.NewReader(tt.stream))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("err = %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("err = %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

func inspect(status container.ContainerState, running bool, startedAt string, health *container.Health) container.InspectResponse {
	return container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{
		Name:  "/web",
		State: &container.State{Status: status, Running: running, StartedAt: startedAt, ExitCode: 2, Health: health},
	}}
}

func TestObserve(t *testing.T) {
	fail := &container.HealthcheckResult{ExitCode: 1, Output: "unhealthy: 500\n"}
	t0 := time.Now()
	type step struct {
		info     container.InspectResponse
		at       time.Duration
		wantDone bool
		wantErr  string
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"healthy", []step{
			{inspect("running", true, "s1", &container.Health{Status: "starting"}), 0, false, ""},
			{inspect("running", true, "s1", &container.Health{Status: "healthy"}), time.Second, true, ""},
		}},
		{"unhealthy names the last check", []step{
			{inspect("running", true, "s1", &container.Health{Status: "unhealthy", FailingStreak: 2, Log: []*container.HealthcheckResult{fail}}), 0, true, "web (abc) is unhealthy after 2 failed checks; last check: exit 1: unhealthy: 500"},
		}},
		{"exited", []step{
			{inspect("exited", false, "s1", nil), 0, true, "is exited (exit code 2)"},
		}},
		{"not started yet", []step{
			{inspect("created", false, "", nil), 0, false, ""},
		}},
		{"no healthcheck settles after 1s", []step{
			{inspect("running", true, "s1", nil), 0, false, ""},
			{inspect("running", true, "s1", nil), 999 * time.Millisecond, false, ""},
			{inspect("running", true, "s1", nil), time.Second, true, ""},
		}},
		{"a restart starts the second over", []step{
			{inspect("running", true, "s1", nil), 0, false, ""},
			{inspect("running", true, "s2", nil), 800 * time.Millisecond, false, ""},
			{inspect("running", true, "s2", nil), 1600 * time.Millisecond, false, ""},
			{inspect("running", true, "s2", nil), 1800 * time.Millisecond, true, ""},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := healthWatch{id: "abc"}
			for i, s := range tt.steps {
				done, err := w.observe(s.info, t0.Add(s.at))
				if done != s.wantDone {
					t.Fatalf("step %d: done = %v, want %v", i, done, s.wantDone)
				}
				if (err == nil) != (s.wantErr == "") || (err != nil && !strings.Contains(err.Error(), s.wantErr)) {
					t.Fatalf("step %d: err = %v, want %q", i, err, s.wantErr)
				}
			}
		})
	}
}

func TestTimeoutErrorSaysWhatItSaw(t *testing.T) {
	w := healthWatch{id: "abc"}
	w.observe(inspect("running", true, "s1", &container.Health{Status: "starting",
		Log: []*container.HealthcheckResult{{ExitCode: 1, Output: "starting: 3s to go"}}}), time.Now())
	err := w.timeout(errors.New("deadline"))
	for _, want := range []string{"web (abc)", "deadline", "status starting", "starting: 3s to go"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("err = %q, want it to contain %q", err, want)
		}
	}
}

// recordingTB stands in for a test whose Skip and Fatal are observed rather
// than obeyed; they panic, as the real ones never return either.
type recordingTB struct {
	testing.TB
	skipped, fatal string
}

type stopped struct{}

func (r *recordingTB) Helper()               {}
func (r *recordingTB) Skip(args ...any)      { r.skipped = fmt.Sprint(args...); panic(stopped{}) }
func (r *recordingTB) Fatal(args ...any)     { r.fatal = fmt.Sprint(args...); panic(stopped{}) }
func (r *recordingTB) Cleanup(func())        {}
func (r *recordingTB) Logf(string, ...any)   {}
func (r *recordingTB) Errorf(string, ...any) { r.fatal = "Errorf" }

func TestClientWhenDockerIsUnreachable(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix://"+t.TempDir()+"/no-docker.sock")
	tests := []struct {
		ci                  string
		wantSkip, wantFatal bool
	}{
		{ci: "", wantSkip: true},
		{ci: "false", wantSkip: true},
		{ci: "true", wantFatal: true},
	}
	for _, tt := range tests {
		t.Run("CI="+tt.ci, func(t *testing.T) {
			t.Setenv("CI", tt.ci)
			r := &recordingTB{TB: t}
			func() {
				defer func() {
					if p := recover(); p != nil && p != (stopped{}) {
						panic(p)
					}
				}()
				Client(r)
				t.Error("Client returned a client for an unreachable Docker")
			}()
			if (r.skipped != "") != tt.wantSkip || (r.fatal != "") != tt.wantFatal {
				t.Errorf("skipped %q, fatal %q; want skip %v, fatal %v", r.skipped, r.fatal, tt.wantSkip, tt.wantFatal)
			}
			if msg := r.skipped + r.fatal; !strings.Contains(msg, "docker is unreachable") {
				t.Errorf("reason %q does not say docker is unreachable", msg)
			}
		})
	}
}

func TestLabelInstruction(t *testing.T) {
	got, err := labelInstruction(map[string]string{"rollagent.test": "abc", "my key": `a "b" $C`})
	if err != nil {
		t.Fatal(err)
	}
	if want := `LABEL "my key"="a \"b\" \$C" "rollagent.test"="abc"` + "\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got, _ := labelInstruction(nil); got != "" {
		t.Errorf("no labels gave %q, want nothing", got)
	}
	for _, bad := range []map[string]string{{"a=b": "1"}, {"": "1"}, {"a": "1\n2"}} {
		if _, err := labelInstruction(bad); err == nil {
			t.Errorf("labelInstruction(%q) took it", bad)
		}
	}
}
