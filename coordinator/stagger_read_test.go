package coordinator_test

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/lockstep"
)

// Read and ReadFor say when the store first saw the slot's latest release
// on its own clock: the same moment at every read until the count moves,
// and never a moment before the read that first saw it. A store of its
// own (a process started later) counts from its own first read.
func TestReadSeesReleasesOnItsOwnClock(t *testing.T) {
	c := consultest.NewDev(t).Client()
	st := coordinator.NewStore(c, coordinator.DefaultPrefix)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	spec, _, err := hashspec.Load([]byte(`{"container":{"image":"demo:v1"},"update":{"stagger":"1m"}}`), hashspec.FormatJSON, "s.json")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Commit(ctx, "web", spec, "op", "stagger"); err != nil {
		t.Fatal(err)
	}
	k, _ := coordinator.NewKeys(coordinator.DefaultPrefix, "web")
	released := func(n string) {
		t.Helper()
		if _, err := c.KV().Put(&api.KVPair{Key: lockstep.HoldersKey(k.Slot()), Value: []byte(`{"holders":{},"released":` + n + `}`)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	seen := func(s *coordinator.Store) time.Time {
		t.Helper()
		gs, err := s.Read(ctx, "web", nil)
		if err != nil {
			t.Fatal(err)
		}
		gf, err := s.ReadFor(ctx, "web", "n1")
		if err != nil {
			t.Fatal(err)
		}
		if !gf.Released.At.Equal(gs.Released.At) {
			t.Fatalf("Read saw the release at %v, ReadFor at %v", gs.Released.At, gf.Released.At)
		}
		return gs.Released.At
	}
	if at := seen(st); !at.IsZero() {
		t.Fatalf("nothing released, but seen at %v", at)
	}
	before := time.Now()
	released("1")
	first := seen(st)
	if first.Before(before) {
		t.Fatalf("the release seen at %v, before the read that saw it (%v)", first, before)
	}
	if again := seen(st); !again.Equal(first) {
		t.Fatalf("the same release seen again at %v, want the first sight %v", again, first)
	}
	later := coordinator.NewStore(c, coordinator.DefaultPrefix)
	if at := seen(later); !at.After(first) {
		t.Fatalf("a new store's first sight %v, want after the first store's %v", at, first)
	}
	released("2")
	if at := seen(st); !at.After(first) {
		t.Fatalf("a new release seen at %v, want after %v", at, first)
	}
}
