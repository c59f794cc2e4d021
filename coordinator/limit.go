package coordinator

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-cleanhttp"
)

// Bounds of what a reader accepts from Consul (see NewClient). A group's
// tree is written by every node's token, and one token could otherwise
// make every reader download whatever it wrote.
const (
	// DefaultReadLimit bounds the answer to one listing of a group's tree
	// (status, history, commit, an agent recording a failure). Past it the
	// tree is read again key by key (readSplit).
	DefaultReadLimit = 4 << 20
	// lookLimit bounds the answer to an agent's look (ReadFor): the
	// desired spec (256 KiB at most, base64 in the answer), the failures of
	// the desired SHA and the holders record, a record per node at most
	// each, and the holder keys, one per holder. Past it the look reads the
	// holders record and the slot keys, or the record alone if the slot
	// keys are over it too.
	lookLimit = 2 << 20
	// keyNamesLimit bounds a listing of key names alone.
	keyNamesLimit = 4 << 20
	// slotRecordLimit bounds the slot's holders record: a claim per node
	// that holds or was lost, some 300 bytes each.
	slotRecordLimit = 1 << 20
	// slotKeyLimit bounds one contender or holder key of the slot: an
	// entry of a hundred bytes.
	slotKeyLimit = 4 << 10
	// maxSlotKeys bounds how many contender and holder keys a split read
	// reads one by one.
	maxSlotKeys = 1024
	// maxSlotNumbers bounds how many slot keys (slot/.holders/.slots/<i>,
	// one per node that holds or claims) a split read reads one by one,
	// apart from maxSlotKeys: they sort before the holder keys.
	maxSlotNumbers = 1024
)

// TooLargeError is an answer from Consul cut off at the reader's limit.
type TooLargeError struct {
	Limit int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("consul's answer is larger than the %d bytes this read accepts", e.Limit)
}

type limitKey struct{}

// withReadLimit bounds the bodies of the answers to requests made with ctx
// to n bytes, on a client made by NewClient.
func withReadLimit(ctx context.Context, n int64) context.Context {
	return context.WithValue(ctx, limitKey{}, n)
}

// NewClient is api.NewClient with a transport that cuts an answer off at
// the limit its request's context carries (withReadLimit), failing the
// read with a *TooLargeError instead of downloading the rest. Every Store
// reader that lists keys other nodes may write sets a limit; a Store on a
// client made otherwise reads without bound.
func NewClient(cfg *api.Config) (*api.Client, error) {
	if cfg.HttpClient == nil {
		tr := cfg.Transport
		if path, ok := strings.CutPrefix(cfg.Address, "unix://"); ok {
			// api.NewClient would put a client of its own in for a
			// socket, without the limit: dial it here instead.
			tr = cleanhttp.DefaultTransport()
			tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", path)
			}
			cfg.Address, cfg.Scheme = "localhost", "http"
		}
		hc, err := api.NewHttpClient(tr, cfg.TLSConfig)
		if err != nil {
			return nil, err
		}
		cfg.HttpClient = hc
	}
	hc := *cfg.HttpClient
	hc.Transport = LimitTransport(hc.Transport)
	cfg.HttpClient = &hc
	return api.NewClient(cfg)
}

// LimitTransport wraps next (nil: http.DefaultTransport) as NewClient does.
func LimitTransport(next http.RoundTripper) http.RoundTripper {
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
