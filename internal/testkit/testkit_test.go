package testkit

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestCounterKeepsEveryRequest(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "hello") }))
	defer srv.Close()
	var replies atomic.Int64
	c := &Counter{OnReply: func(*http.Request, *http.Response) { replies.Add(1) }}
	hc := &http.Client{Transport: c}
	for _, path := range []string{"/v1/kv/a", "/v1/kv/a?index=7", "/v1/agent/self"} {
		resp, err := hc.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	blocking := c.Count(func(r Request) bool { return r.Blocking })
	for _, tt := range []struct {
		name      string
		got, want int
	}{
		{"total", c.Total(), 3},
		{"to a path", c.To(http.MethodGet, "/v1/kv/a"), 2},
		{"containing", c.Containing("/agent/"), 1},
		{"blocking", blocking, 1},
		{"bytes read", int(c.Bytes()), 15},
		{"replies seen", int(replies.Load()), 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Fatalf("%d, want %d", tt.got, tt.want)
			}
		})
	}
}

func TestPollIsBounded(t *testing.T) {
	n := 0
	if !PollEvery(time.Second, time.Millisecond, func() bool { n++; return n == 3 }) || n != 3 {
		t.Fatalf("polled %d times, want 3 and success", n)
	}
	start := time.Now()
	if PollEvery(50*time.Millisecond, 10*time.Millisecond, func() bool { return false }) {
		t.Fatal("a condition that never holds held")
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("a 50ms poll took %s", took)
	}
}

func TestBufferIsReadWhileWritten(t *testing.T) {
	var b Buffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 100 {
			_, _ = b.Write([]byte("x"))
		}
	}()
	for b.Len() < 100 {
		_ = b.String()
	}
	<-done
	if b.String() != strings.Repeat("x", 100) {
		t.Fatalf("buffer %q", b.String())
	}
}
