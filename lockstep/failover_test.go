package lockstep

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rollagent/rollagent/internal/consultest"
)

func TestKilledHolderIsReplaced(t *testing.T) {
	srv := consultest.NewDev(t)
	c := srv.Client()
	g := commit(t, c, "sha-k", 1)
	child := startHolder(t, srv.HTTPAddr, g)
	ctx := ctxFor(t, time.Minute)
	next := make(chan *Hold, 1)
	m := newSem(t, c, "next")
	go func() {
		h, err := m.Acquire(ctx, g)
		if err != nil {
			t.Error(err)
		}
		next <- h
	}()
	select {
	case <-next:
		t.Fatal("acquired while the child held the slot")
	case <-time.After(time.Second):
	}
	killed := time.Now()
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case h := <-next:
		if h == nil {
			t.FailNow()
		}
		t.Logf("next holder took the slot %s after SIGKILL", time.Since(killed).Round(time.Millisecond))
		_ = h.Release(ctx)
	case <-time.After(20 * time.Second):
		t.Fatal("the slot of a killed holder was not reclaimed within 20s")
	}
}

// contendLoop acquires, holds briefly and releases n times, making a new
// session whenever one is lost, as an agent would. It records each hold.
func contendLoop(ctx context.Context, t *testing.T, srv *consultest.Server, g Gate, who string, n int, out chan<- interval) {
	c := srv.Client()
	for done := 0; done < n && ctx.Err() == nil; {
		s, err := NewSession(ctx, c, SessionOptions{})
		if err != nil {
			time.Sleep(200 * time.Millisecond) // Consul is restarting; bounded by ctx
			continue
		}
		m, _ := New(c, s, Options{Prefix: testPrefix, Name: who})
		for done < n && ctx.Err() == nil {
			h, err := m.Acquire(ctx, g)
			if err != nil {
				if !errors.Is(err, ErrSessionLost) && ctx.Err() == nil {
					t.Errorf("%s: %v", who, err)
				}
				break
			}
			start := time.Now()
			if _, err := h.Fence(ctx); err == nil {
				time.Sleep(20 * time.Millisecond)
				out <- interval{who, start, time.Now()}
				done++
			}
			if err := h.Release(ctx); err != nil {
				break
			}
		}
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = s.Close(cctx)
		cancel()
	}
}

func TestConsulRestartNoDoubleGrant(t *testing.T) {
	srv := consultest.New(t, consultest.Options{Persistent: true})
	g := commit(t, srv.Client(), "sha-r", 1)
	ctx := ctxFor(t, 3*time.Minute)
	out := make(chan interval, 1000)
	var wg sync.WaitGroup
	for i := 0; i < 5; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			contendLoop(ctx, t, srv, g, name(i), 6, out)
		}()
	}
	eventually(t, 30*time.Second, "the first holds", func() bool { return len(out) >= 3 })
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(out)
	var log []interval
	for iv := range out {
		log = append(log, iv)
	}
	if len(log) != 30 {
		t.Fatalf("%d of 30 holds completed", len(log))
	}
	if got := maxOverlap(log); got > 1 {
		t.Fatalf("%d fenced holds overlapped, K=1", got)
	}
}
