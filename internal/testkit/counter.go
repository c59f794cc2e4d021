package testkit

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-cleanhttp"
	"github.com/rollagent/rollagent/internal/consultest"
)

// Request is what a Counter keeps of one request.
type Request struct {
	Method, Path string
	Blocking     bool // a blocking query: it names the index it waits on
}

// Counter is an http.RoundTripper that keeps every request of the client it
// sits in, and counts the bytes of the replies' bodies that client reads.
// Put it in a client with consultest's Server.ClientVia.
type Counter struct {
	// Next sends the requests. Optional, defaults to a pooled transport of
	// its own.
	Next http.RoundTripper
	// OnReply, when set, sees each reply before the client reads it.
	// Optional, defaults to nothing.
	OnReply func(*http.Request, *http.Response)

	once  sync.Once
	bytes atomic.Int64
	mu    sync.Mutex
	reqs  []Request
}

// RoundTrip implements http.RoundTripper.
func (c *Counter) RoundTrip(r *http.Request) (*http.Response, error) {
	c.once.Do(func() {
		if c.Next == nil {
			c.Next = cleanhttp.DefaultPooledTransport()
		}
	})
	_, blocking := r.URL.Query()["index"]
	c.mu.Lock()
	c.reqs = append(c.reqs, Request{Method: r.Method, Path: r.URL.Path, Blocking: blocking})
	c.mu.Unlock()
	resp, err := c.Next.RoundTrip(r)
	if err != nil {
		return resp, err
	}
	if c.OnReply != nil {
		c.OnReply(r, resp)
	}
	resp.Body = &countedBody{ReadCloser: resp.Body, n: &c.bytes}
	return resp, nil
}

// Total is how many requests were sent.
func (c *Counter) Total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.reqs)
}

// Count is how many requests match.
func (c *Counter) Count(match func(Request) bool) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, r := range c.reqs {
		if match(r) {
			n++
		}
	}
	return n
}

// To is how many requests of method went to path.
func (c *Counter) To(method, path string) int {
	return c.Count(func(r Request) bool { return r.Method == method && r.Path == path })
}

// Containing is how many requests went to a path containing sub.
func (c *Counter) Containing(sub string) int {
	return c.Count(func(r Request) bool { return strings.Contains(r.Path, sub) })
}

// Bytes is how many bytes of the replies' bodies the client read.
func (c *Counter) Bytes() int64 { return c.bytes.Load() }

type countedBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// CountedClient returns a client of srv and the Counter that keeps its
// requests.
func CountedClient(srv *consultest.Server) (*api.Client, *Counter) {
	c := &Counter{}
	return srv.ClientVia(c), c
}
