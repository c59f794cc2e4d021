package consultest

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-cleanhttp"
)

// ErrCut is what a request of a client cut off from Consul (Faults.Cut)
// fails with: it never reached Consul.
var ErrCut = errors.New("consultest: cut off from consul")

// ErrReplyLost is what a Faults.OnTxn hook returns for a transaction that
// Consul applied but whose reply never came back.
var ErrReplyLost = errors.New("consultest: reply lost after consul applied the transaction")

// Faults is an http.RoundTripper between one api client and a real Consul
// agent. It puts there what the network can do to that client alone: cut
// it off from Consul for a while (Cut), or lose or hold back the reply to a
// transaction that Consul did apply (OnTxn). Everything else goes through
// as it is, and what Consul does by itself (running the checks of the
// client's process, say) is untouched.
type Faults struct {
	next http.RoundTripper
	cut  atomic.Bool

	mu  sync.Mutex
	txn *txnFault // armed by OnTxn, nil once fired
}

type txnFault struct {
	match func(api.TxnOps) bool
	reply func() error
}

// FaultyClient returns an api client for this agent whose requests go
// through a Faults of its own, with no fault armed.
func (s *Server) FaultyClient() (*api.Client, *Faults) {
	s.t.Helper()
	f := &Faults{next: cleanhttp.DefaultPooledTransport()}
	return s.ClientVia(f), f
}

// Cut cuts the client off from Consul (true) or puts it back (false).
// While cut, every request fails at once with ErrCut, before anything is
// sent, as when the link to Consul is down.
func (f *Faults) Cut(cut bool) { f.cut.Store(cut) }

// OnTxn arms a fault for the next transaction whose ops match accepts:
// Consul applies it, then reply runs, with Consul's answer held back
// meanwhile. The client gets reply's error instead of the answer, or the
// answer, late, when reply returns nil. It fires once; a second OnTxn
// replaces one that has not fired. reply runs on the client's goroutine
// and must not call t.Fatal.
func (f *Faults) OnTxn(match func(api.TxnOps) bool, reply func() error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.txn = &txnFault{match: match, reply: reply}
}

// TxnHas says whether ops hold an op of verb on key, or on any key when key
// is "": for OnTxn to tell one transaction of lockstep's from another.
func TxnHas(ops api.TxnOps, verb api.KVOp, key string) bool {
	for _, op := range ops {
		if op.KV != nil && op.KV.Verb == verb && (key == "" || op.KV.Key == key) {
			return true
		}
	}
	return false
}

func (f *Faults) RoundTrip(r *http.Request) (*http.Response, error) {
	if f.cut.Load() {
		return nil, ErrCut
	}
	fault, r, err := f.claim(r)
	if err != nil {
		return nil, err
	}
	resp, err := f.next.RoundTrip(r)
	if fault == nil || err != nil {
		return resp, err
	}
	if ferr := fault.reply(); ferr != nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return nil, ferr
	}
	return resp, nil
}

// claim disarms and returns the armed fault if r is a transaction it
// matches, with r rebuilt around the body it had to read to tell.
func (f *Faults) claim(r *http.Request) (*txnFault, *http.Request, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.txn == nil || r.Method != http.MethodPut || r.URL.Path != "/v1/txn" || r.Body == nil {
		return nil, r, nil
	}
	body, err := io.ReadAll(r.Body)
	r.Body.Close()
	if err != nil {
		return nil, r, err
	}
	r = r.Clone(r.Context())
	r.Body = io.NopCloser(bytes.NewReader(body))
	var ops api.TxnOps
	if json.Unmarshal(body, &ops) != nil || !f.txn.match(ops) {
		return nil, r, nil
	}
	fault := f.txn
	f.txn = nil
	return fault, r, nil
}
