package coordinator

import (
	"context"
	"net"
	"net/http"
	"strings"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-cleanhttp"
	"github.com/rollagent/rollagent/internal/readlimit"
	"github.com/rollagent/rollagent/lockstep"
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
	// slotRecordLimit and slotKeyLimit bound the slot's holders record and
	// one of its keys as lockstep's own bounded reads do, so that status
	// and agents read a slot alike.
	slotRecordLimit = lockstep.RecordLimit
	slotKeyLimit    = lockstep.KeyLimit
	// maxSlotKeys bounds how many contender and holder keys a split read
	// reads one by one.
	maxSlotKeys = 1024
	// maxSlotNumbers bounds how many slot keys (slot/.holders/.slots/<i>,
	// one per node that holds or claims) a split read reads one by one,
	// apart from maxSlotKeys: they sort before the holder keys.
	maxSlotNumbers = 1024
)

// TooLargeError is an answer from Consul cut off at the reader's limit.
type TooLargeError = readlimit.TooLargeError

// withReadLimit bounds the bodies of the answers to requests made with ctx
// to n bytes, on a client made by NewClient.
func withReadLimit(ctx context.Context, n int64) context.Context {
	return readlimit.With(ctx, n)
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
// The limits lockstep's reads set (see lockstep's doc.go, "Bounded
// reads") are honoured by it too.
func LimitTransport(next http.RoundTripper) http.RoundTripper {
	return readlimit.Transport(next)
}
