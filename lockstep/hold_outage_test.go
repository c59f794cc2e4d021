package lockstep

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rollagent/rollagent/internal/consultest"
)

// cutTransport is a RoundTripper that can cut every request off, those in
// flight included, as a Consul agent gone unreachable does.
type cutTransport struct {
	base http.RoundTripper
	cut  atomic.Bool
	gone chan struct{}
}

func (r *cutTransport) RoundTrip(q *http.Request) (*http.Response, error) {
	if r.cut.Load() {
		return nil, errors.New("test: consul unreachable")
	}
	ctx, cancel := context.WithCancel(q.Context())
	go func() {
		select {
		case <-r.gone:
			cancel()
		case <-ctx.Done():
		}
	}()
	resp, err := r.base.RoundTrip(q.WithContext(ctx))
	if err != nil {
		cancel()
	}
	return resp, err
}

// A hold's Lost closes as its session ends, also while Consul does not
// answer: its holder must stop acting then, not once Consul is back.
func TestHoldLostWhileConsulIsUnreachable(t *testing.T) {
	srv := consultest.NewDev(t)
	rt := &cutTransport{base: http.DefaultTransport.(*http.Transport).Clone(), gone: make(chan struct{})}
	c := srv.ClientVia(rt)
	g := commit(t, c, "x", 1)
	ctx := ctxFor(t, time.Minute)
	m := newSem(t, c, "n1")
	h, err := m.Acquire(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(watchAfter + 500*time.Millisecond) // the hold's watch is on
	rt.cut.Store(true)
	close(rt.gone)
	select {
	case <-m.s.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the session did not end with Consul unreachable")
	}
	select {
	case <-h.Lost():
	case <-time.After(time.Second):
		t.Fatal("Hold.Lost did not close as the session ended, with Consul unreachable")
	}
}
