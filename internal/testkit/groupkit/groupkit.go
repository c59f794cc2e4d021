// Package groupkit holds what tests above coordinator share about one
// group: the common setup of a test against a Consul dev agent (a Store, a
// group name of this test run's own, its keys) and the lookup of the
// group's slot holders. Every KV path comes from coordinator's Keys.
//
// It imports coordinator and lockstep, so their in-package tests cannot use
// it: they use testkit alone.
package groupkit

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/fleettest"
	"github.com/rollagent/rollagent/internal/testkit"
	"github.com/rollagent/rollagent/lockstep"
)

// Group is one group of a test, on a Consul dev agent of its own.
type Group struct {
	t      testing.TB
	Srv    *consultest.Server
	Client *api.Client        // the test's own client of Srv
	Store  *coordinator.Store // the test's view, on Client
	Name   string             // the group's name, unique to this test run
	Keys   coordinator.Keys
}

// New starts a Consul dev agent for the test and names a group on it after
// name, made unique to this test run (fleettest.Group).
func New(t testing.TB, name string) *Group {
	t.Helper()
	return On(t, consultest.NewDev(t), name)
}

// Dev starts a Consul dev agent for the test and returns it, its client
// and a Store on that client under the default prefix: the opening of a
// test that names its groups itself.
func Dev(t testing.TB) (*consultest.Server, *api.Client, *coordinator.Store) {
	t.Helper()
	srv := consultest.NewDev(t)
	c := srv.Client()
	return srv, c, coordinator.NewStore(c, coordinator.DefaultPrefix)
}

// NewVia is New whose client, and so its Store, sends its requests through
// rt: a testkit.Counter, say, for a test that counts what an agent on that
// Store asks of Consul.
func NewVia(t testing.TB, name string, rt http.RoundTripper) *Group {
	t.Helper()
	srv := consultest.NewDev(t)
	return on(t, srv, srv.ClientVia(rt), name)
}

// On is New on a Consul agent the test already has: a test with several
// groups, or one that cuts its Consul off.
func On(t testing.TB, srv *consultest.Server, name string) *Group {
	t.Helper()
	return on(t, srv, srv.Client(), name)
}

func on(t testing.TB, srv *consultest.Server, c *api.Client, name string) *Group {
	t.Helper()
	g := &Group{t: t, Srv: srv, Client: c, Store: coordinator.NewStore(c, ""), Name: fleettest.Group(name)}
	k, err := g.Store.Keys(g.Name)
	if err != nil {
		t.Fatal(err)
	}
	g.Keys = k
	return g
}

// WaitFor polls cond for at most d, failing the test that made the group
// if it never holds (testkit.Eventually).
func (g *Group) WaitFor(d time.Duration, what string, cond func() bool) {
	g.t.Helper()
	testkit.Eventually(g.t, d, what, cond)
}

// Steady watches for d, every interval, that nothing changes, failing the
// test that made the group with what check says did (testkit.Steady).
func (g *Group) Steady(d, interval time.Duration, check func() error) {
	g.t.Helper()
	testkit.Steady(g.t, d, interval, check)
}

// Holders reads the group's slot, once.
func (g *Group) Holders() (*lockstep.Holders, error) { return Holders(g.Client, g.Keys) }

// Keys names the keys of group, as every agent and the CLI do (the
// default prefix), failing the test for a name no group can have.
func Keys(t testing.TB, group string) coordinator.Keys {
	t.Helper()
	k, err := coordinator.NewKeys("", group)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// Holders reads the slot of the group k names, once.
func Holders(c *api.Client, k coordinator.Keys) (*lockstep.Holders, error) {
	return lockstep.ReadHolders(c, k.Slot(), nil)
}

// Holding says under which session name holds a slot in h, which may be
// nil (the slot could not be read).
func Holding(h *lockstep.Holders, name string) (session string, ok bool) {
	if h == nil {
		return "", false
	}
	for id, e := range h.Holding {
		if e.Name == name {
			return id, true
		}
	}
	return "", false
}

// HolderNames lists who holds a slot in h, sorted; none for a nil h.
func HolderNames(h *lockstep.Holders) []string {
	var names []string
	if h != nil {
		for _, e := range h.Holding {
			names = append(names, e.Name)
		}
	}
	slices.Sort(names)
	return names
}
