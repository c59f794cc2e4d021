// Package readlimit bounds the answers a Consul client accepts, per
// request: a reader puts a limit in the request's context (With), and a
// client whose transport is Transport cuts the answer's body off there,
// failing the read with a *TooLargeError instead of downloading the rest.
// A group's tree is written by every node's token, and one token could
// otherwise make every reader download whatever it wrote. coordinator and
// lockstep share it, so that one client made by coordinator.NewClient
// bounds the reads of both.
package readlimit

import (
	"context"
	"fmt"
	"io"
	"net/http"
)

// TooLargeError is an answer from Consul cut off at the reader's limit.
type TooLargeError struct {
	Limit int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("consul's answer is larger than the %d bytes this read accepts", e.Limit)
}

type limitKey struct{}

// With bounds the bodies of the answers to requests made with ctx to n
// bytes, on a client whose transport is Transport. On any other client
// the read is not bounded.
func With(ctx context.Context, n int64) context.Context {
	return context.WithValue(ctx, limitKey{}, n)
}

// Transport wraps next (nil: http.DefaultTransport) so that it cuts an
// answer off at the limit its request's context carries (With).
func Transport(next http.RoundTripper) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return limitTransport{next}
}

type limitTransport struct{ next http.RoundTripper }

func (l limitTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := l.next.RoundTrip(r)
	if n, ok := r.Context().Value(limitKey{}).(int64); ok && err == nil && resp.StatusCode == http.StatusOK {
		resp.Body = &limitedBody{rc: resp.Body, left: n, limit: n}
	}
	return resp, err
}

// limitedBody fails a read past its limit. The caller then closes it,
// which drops the connection rather than reading the rest.
type limitedBody struct {
	rc          io.ReadCloser
	left, limit int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, &TooLargeError{Limit: b.limit}
	}
	if int64(len(p)) > b.left {
		p = p[:b.left+1] // one byte more tells a body of exactly the limit from a larger one
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		return n, &TooLargeError{Limit: b.limit}
	}
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }
