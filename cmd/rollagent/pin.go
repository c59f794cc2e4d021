package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/distribution/reference"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/rollagent/rollagent/hashspec"
)

// errRegistry marks an error of an image registry, which the --timeout
// explanation must not blame on Consul.
var errRegistry = errors.New("image registry")

// pinTarget says how a spec's image is pinned: a reference that carries a
// digest already is left alone (pin false); any other is the tag to
// resolve, ":latest" spelled out when it names none, as Docker pulls it.
// The pinned reference keeps the tag before the digest, name:tag@sha256:…,
// as Swarm writes it: Docker Engine pulls and looks it up by the digest
// alone, and whoever reads the spec still sees which tag it came from.
func pinTarget(img string) (tagged string, pin bool, err error) {
	named, err := reference.ParseNormalizedNamed(img)
	if err != nil {
		return "", false, fmt.Errorf("image %q: %w", img, err)
	}
	if _, ok := named.(reference.Digested); ok {
		return "", false, nil
	}
	if _, ok := named.(reference.Tagged); ok {
		return img, true, nil
	}
	return img + ":latest", true, nil
}

// loopbackRegistry says whether a registry (host or host:port) is on
// loopback: the only registries Docker reaches over plain HTTP unless its
// daemon is told otherwise (127.0.0.0/8, and ::1).
func loopbackRegistry(registry string) bool {
	_, ok := loopbackHost(registry)
	return ok
}

// tlsUnlessLoopback refuses plain HTTP to a registry off loopback.
// go-containerregistry falls back to HTTP for private (RFC 1918) and .local
// addresses too; Docker does not, and a digest read over plain HTTP from
// such a host is one that anybody on the path could have chosen.
type tlsUnlessLoopback struct{ base http.RoundTripper }

func (t tlsUnlessLoopback) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Scheme == "http" && !loopbackRegistry(r.URL.Host) {
		return nil, fmt.Errorf("plain HTTP to %s refused: only a registry on loopback is reached without TLS, as Docker does by default", r.URL.Host)
	}
	return t.base.RoundTrip(r)
}

// resolveDigest asks the image's registry for the digest of the manifest
// (or index, for a multi-platform image) that its tag names now, with the
// credentials docker login stored.
func resolveDigest(ctx context.Context, tagged string, timeout time.Duration) (string, error) {
	ref, err := name.ParseReference(tagged)
	if err != nil {
		return "", fmt.Errorf("image %q: %w", tagged, err)
	}
	reg := ref.Context().RegistryStr()
	if loopbackRegistry(reg) {
		if ref, err = name.ParseReference(tagged, name.Insecure); err != nil {
			return "", fmt.Errorf("image %q: %w", tagged, err)
		}
	}
	opts := []remote.Option{
		remote.WithContext(ctx),
		remote.WithAuthFromKeychain(authn.DefaultKeychain),
		remote.WithTransport(tlsUnlessLoopback{remote.DefaultTransport}),
	}
	desc, err := remote.Head(ref, opts...)
	if err != nil && answered(err) && !notFound(err) {
		// A registry that serves no HEAD of manifests may serve a GET.
		var full *remote.Descriptor
		if full, err = remote.Get(ref, opts...); err == nil {
			desc = &full.Descriptor
		}
	}
	switch {
	case err == nil:
		return desc.Digest.String(), nil
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return "", fmt.Errorf("%w %s: no answer for image %s within --timeout=%s (ROLLAGENT_TIMEOUT)", errRegistry, reg, tagged, timeout)
	case notFound(err):
		return "", fmt.Errorf("%w %s: image %s not found (HTTP 404: no such tag or repository)", errRegistry, reg, tagged)
	default:
		return "", fmt.Errorf("%w %s: cannot resolve image %s to a digest: %v", errRegistry, reg, tagged, err)
	}
}

// answered says whether err is the registry's answer, not a failure to
// reach it.
func answered(err error) bool {
	var te *transport.Error
	return errors.As(err, &te)
}

func notFound(err error) bool {
	var te *transport.Error
	return errors.As(err, &te) && te.StatusCode == http.StatusNotFound
}

// pinSpec returns spec with its image pinned to the digest its registry
// serves for the tag now, and the SHA of that spec, which thus covers the
// digest. A spec whose image carries a digest is returned as it is.
func pinSpec(ctx context.Context, spec *hashspec.Spec, sha string, timeout time.Duration) (*hashspec.Spec, string, error) {
	tagged, pin, err := pinTarget(spec.Container.Image)
	if err != nil || !pin {
		return spec, sha, err
	}
	digest, err := resolveDigest(ctx, tagged, timeout)
	if err != nil {
		return nil, "", err
	}
	pinned := *spec
	pinned.Container.Image = tagged + "@" + digest
	if err := pinned.Validate(); err != nil {
		return nil, "", fmt.Errorf("pinned image: %w", err)
	}
	sha, err = pinned.SHA()
	return &pinned, sha, err
}

// PinFlags ask for a spec's image tag to be pinned to its digest.
type PinFlags struct {
	PinDigest bool `name:"pin-digest" help:"Resolve the image's tag to its digest through the registry (within --timeout) and use name:tag@sha256:…, so the SHA covers the image's content; a reference with a digest is left alone."`
}

// pin pins spec's image when the flag says so.
func (f PinFlags) pin(ctx context.Context, spec *hashspec.Spec, sha string, timeout time.Duration) (*hashspec.Spec, string, error) {
	if !f.PinDigest {
		return spec, sha, nil
	}
	return pinSpec(ctx, spec, sha, timeout)
}
