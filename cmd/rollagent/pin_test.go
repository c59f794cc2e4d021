package main

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/consultest"
)

// memRegistry serves an image registry in memory on loopback, where
// Docker and rollagent speak plain HTTP, and returns its host:port. The
// registry reads no credentials, and neither should the test's client.
func memRegistry(t *testing.T) string {
	t.Helper()
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// pushRandom pushes a random image as ref and returns its digest.
func pushRandom(t *testing.T, ref string) string {
	t.Helper()
	img, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		t.Fatal(err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// desiredImage reads the group's desired SHA and the image of its spec.
func desiredImage(t *testing.T, srv *consultest.Server, group string) (sha, image string) {
	t.Helper()
	g, err := coordinator.NewStore(srv.Client(), coordinator.DefaultPrefix).Read(context.Background(), group, nil)
	if err != nil {
		t.Fatal(err)
	}
	if g.Desired == nil || g.Spec == nil {
		t.Fatalf("group %s: nothing desired", group)
	}
	return g.Desired.SHA, g.Spec.Container.Image
}

// commit --pin-digest commits the image pinned to the digest the registry
// serves for its tag, so the SHA covers the image's content; hash
// --pin-digest prints the same SHA, and the environment variable asks for
// it as the flag does.
func TestCommitPinDigestPinsTheTag(t *testing.T) {
	srv := consultest.NewDev(t)
	reg := memRegistry(t)
	image := reg + "/rollagent-test/web:v1"
	digest := pushRandom(t, image)
	spec := writeSpec(t, "web.json", []byte(`{"container": {"image": "`+image+`"}}`))

	code, unpinned, errs := runCLI(t, srv.HTTPAddr, "hash", "--group", "web", "-f", spec)
	if code != 0 {
		t.Fatalf("hash: code %d, stderr %s", code, errs)
	}
	code, hashed, errs := runCLI(t, srv.HTTPAddr, "hash", "--group", "web", "-f", spec, "--pin-digest")
	if code != 0 {
		t.Fatalf("hash --pin-digest: code %d, stderr %s", code, errs)
	}
	code, out, errs := runCLI(t, srv.HTTPAddr, "commit", "web", "-f", spec, "--pin-digest")
	if code != 0 {
		t.Fatalf("commit --pin-digest: code %d, stderr %s", code, errs)
	}
	sha, got := desiredImage(t, srv, "web")
	if want := image + "@" + digest; got != want {
		t.Fatalf("committed image %q, want %q", got, want)
	}
	if sha == strings.TrimSpace(unpinned) {
		t.Fatalf("pinned spec has the unpinned SHA %s", sha)
	}
	if first := strings.SplitN(out, "\n", 2)[0]; first != sha || strings.TrimSpace(hashed) != sha {
		t.Fatalf("commit printed %q, hash --pin-digest %q; desired is %s", out, hashed, sha)
	}
	if !strings.Contains(out, "pinned to "+image+"@"+digest) {
		t.Fatalf("commit output %q does not say what it pinned", out)
	}

	// The tag moves: the environment's pin takes the new digest.
	moved := pushRandom(t, image)
	t.Setenv("ROLLAGENT_PIN_DIGEST", "true")
	if code, _, errs = runCLI(t, srv.HTTPAddr, "commit", "web", "-f", spec); code != 0 {
		t.Fatalf("commit with ROLLAGENT_PIN_DIGEST: code %d, stderr %s", code, errs)
	}
	if _, got = desiredImage(t, srv, "web"); got != image+"@"+moved {
		t.Fatalf("after the tag moved, committed image %q, want %q", got, image+"@"+moved)
	}
}

// A reference that carries a digest already is committed as it is, and
// no registry is asked: this one could not be reached.
func TestCommitPinDigestLeavesADigestAlone(t *testing.T) {
	srv := consultest.NewDev(t)
	image := closedPort(t) + "/rollagent-test/web:v1@sha256:" + strings.Repeat("ab", 32)
	spec := writeSpec(t, "web.json", []byte(`{"container": {"image": "`+image+`"}}`))
	code, out, errs := runCLI(t, srv.HTTPAddr, "commit", "web", "-f", spec, "--pin-digest")
	if code != 0 {
		t.Fatalf("commit --pin-digest: code %d, stderr %s", code, errs)
	}
	if _, got := desiredImage(t, srv, "web"); got != image || strings.Contains(out, "pinned") {
		t.Fatalf("committed image %q (output %q), want %q unchanged", got, out, image)
	}
}

// A tag the registry does not have, a registry that cannot be reached and
// one that never answers each fail the commit with an error that names the
// image and the registry, and nothing is written to KV.
func TestCommitPinDigestRefusesWhatCannotBeResolved(t *testing.T) {
	srv := consultest.NewDev(t)
	commitWeb(t, srv.HTTPAddr)
	reg := memRegistry(t)
	pushRandom(t, reg+"/rollagent-test/web:v1")
	closed, silent := closedPort(t), silentServer(t)
	tests := []struct {
		name, image string
		args        []string
		want        []string
	}{
		{"unknown tag", reg + "/rollagent-test/web:v9", nil,
			[]string{"registry " + reg, "image " + reg + "/rollagent-test/web:v9 not found"}},
		{"unknown repository", reg + "/rollagent-test/nope", nil,
			[]string{"registry " + reg, "image " + reg + "/rollagent-test/nope:latest not found"}},
		{"unreachable registry", closed + "/rollagent-test/web:v1", nil,
			[]string{"registry " + closed, "cannot resolve image " + closed + "/rollagent-test/web:v1", "refused"}},
		{"silent registry", silent + "/rollagent-test/web:v1", []string{"--timeout=1s"},
			[]string{"registry " + silent, "no answer for image " + silent + "/rollagent-test/web:v1 within --timeout=1s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := writeSpec(t, "web.json", []byte(`{"container": {"image": "`+tt.image+`"}}`))
			args := append(append([]string{}, tt.args...), "commit", "web", "-f", spec, "--pin-digest")
			errs := refused(t, srv, tt.want[0], args...)
			for _, w := range append(tt.want[1:], "nothing committed") {
				if !strings.Contains(errs, w) {
					t.Errorf("stderr %q does not say %q", errs, w)
				}
			}
			if strings.Contains(errs, "Consul") {
				t.Errorf("stderr %q blames Consul for the registry", errs)
			}
		})
	}
}

func TestPinTarget(t *testing.T) {
	digest := "sha256:" + strings.Repeat("ab", 32)
	tests := []struct {
		image, tagged string
		pin           bool
	}{
		{"registry.example/web:2.4.1", "registry.example/web:2.4.1", true},
		{"nginx", "nginx:latest", true},
		{"127.0.0.1:5000/web", "127.0.0.1:5000/web:latest", true},
		{"registry.example/web@" + digest, "", false},
		{"registry.example/web:2.4.1@" + digest, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.image, func(t *testing.T) {
			tagged, pin, err := pinTarget(tt.image)
			if err != nil || tagged != tt.tagged || pin != tt.pin {
				t.Fatalf("pinTarget(%q) = %q, %v, %v; want %q, %v", tt.image, tagged, pin, err, tt.tagged, tt.pin)
			}
		})
	}
}

// Plain HTTP reaches a registry on loopback only, as Docker's default
// insecure registries are 127.0.0.0/8; go-containerregistry alone would
// also fall back to it for private addresses.
func TestTLSUnlessLoopback(t *testing.T) {
	tests := []struct {
		url     string
		allowed bool
	}{
		{"http://127.0.0.1:5000/v2/", true},
		{"http://127.3.4.5:5000/v2/", true},
		{"http://localhost:5000/v2/", true},
		{"http://[::1]:5000/v2/", true},
		{"http://10.0.0.7:5000/v2/", false},
		{"http://192.168.1.2/v2/", false},
		{"http://registry.local/v2/", false},
		{"https://10.0.0.7:5000/v2/", true},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			var reached bool
			rt := tlsUnlessLoopback{roundTripFunc(func(*http.Request) (*http.Response, error) {
				reached = true
				return nil, errors.New("stop")
			})}
			req := httptest.NewRequest(http.MethodGet, tt.url, nil)
			_, err := rt.RoundTrip(req)
			if reached != tt.allowed {
				t.Fatalf("%s: reached the network %v, want %v (err %v)", tt.url, reached, tt.allowed, err)
			}
			if !tt.allowed && !strings.Contains(err.Error(), "plain HTTP") {
				t.Fatalf("%s: error %v does not say why", tt.url, err)
			}
		})
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
