package agent_test

import (
	"context"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/image"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/dockertest"
)

// One SHA, two images: the SHA covers the image's name, and a tag already
// on a host is not pulled again, so two nodes that took one tag at
// different times run different code. Each node's record names the image
// its container runs, and the split shows. One Docker engine stands for
// two hosts: n1 converges while the tag names one image, then the tag is
// moved to another, then n2 converges.
func TestImageIDSplitUnderOneSHA(t *testing.T) {
	f := newFleet(t, "imageid")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tag := "rollagent-test/imageid:" + dockertest.RunID()
	t.Cleanup(func() {
		// Only the tag: the release images it names are the fleet's to
		// remove, and stay tagged as theirs meanwhile.
		rctx, rcancel := context.WithTimeout(context.Background(), time.Minute)
		defer rcancel()
		if _, err := f.docker.ImageRemove(rctx, tag, image.RemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
			t.Logf("untag %s: %v", tag, err)
		}
	})
	retag := func(src string) string {
		t.Helper()
		if err := f.docker.ImageTag(ctx, src, tag); err != nil {
			t.Fatal(err)
		}
		img, err := f.docker.ImageInspect(ctx, tag)
		if err != nil {
			t.Fatal(err)
		}
		return img.ID
	}
	idA := retag(f.image("a", map[string]string{"RELEASE": "a"}))
	sha := f.commit(f.spec(tag, 1, "pause", 1))
	f.start("n1")
	f.waitFor(90*time.Second, "n1 converged", func() bool { return f.converged([]string{"n1"}, sha) })
	idB := retag(f.image("b", map[string]string{"RELEASE": "b"}))
	if idA == idB {
		t.Fatal("the two releases built one image")
	}
	f.start("n2")
	f.waitFor(90*time.Second, "n2 converged", func() bool { return f.converged([]string{"n1", "n2"}, sha) })
	want := map[string]string{"n1": idA, "n2": idB}
	var gs *coordinator.GroupState
	f.waitFor(30*time.Second, "each record naming its image", func() bool {
		gs = f.state()
		for _, n := range gs.Nodes {
			if n.ImageID != want[n.Node] {
				return false
			}
		}
		return len(gs.Nodes) == 2
	})
	splits := coordinator.ImageSplits(gs.Nodes)
	if len(splits) != 1 || splits[0].SHA != sha || len(splits[0].Images) != 2 ||
		len(splits[0].Images[idA]) != 1 || len(splits[0].Images[idB]) != 1 {
		t.Fatalf("image splits %+v, want %s split between %s on n1 and %s on n2", splits, sha, idA, idB)
	}
}
