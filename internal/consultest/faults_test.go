package consultest

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

// The regression tests of lost and late replies trust Faults to do what it
// says to a real Consul: a cut writes nothing, a lost reply was applied all
// the same, a held reply comes late but whole.
func TestFaults(t *testing.T) {
	srv := NewDev(t)
	direct := srv.Client().KV()
	hold := 300 * time.Millisecond
	tests := []struct {
		name    string
		arm     func(*Faults)
		wantErr error
		written bool
		late    bool
	}{
		{"cut: nothing reaches consul", func(f *Faults) { f.Cut(true) }, ErrCut, false, false},
		{"reply lost after the write", func(f *Faults) {
			f.OnTxn(func(api.TxnOps) bool { return true }, func() error { return ErrReplyLost })
		}, ErrReplyLost, true, false},
		{"reply held back", func(f *Faults) {
			f.OnTxn(func(api.TxnOps) bool { return true }, func() error { time.Sleep(hold); return nil })
		}, nil, true, true},
		{"no match: untouched", func(f *Faults) {
			f.OnTxn(func(ops api.TxnOps) bool { return TxnHas(ops, api.KVLock, "") }, func() error { return ErrReplyLost })
		}, nil, true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, f := srv.FaultyClient()
			key := "faults/" + tc.name
			tc.arm(f)
			start := time.Now()
			_, _, _, err := c.Txn().Txn(api.TxnOps{{KV: &api.KVTxnOp{Verb: api.KVSet, Key: key, Value: []byte("x")}}}, nil)
			took := time.Since(start)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("txn error %v, want %v", err, tc.wantErr)
			}
			if tc.late != (took >= hold) {
				t.Fatalf("reply after %s; want it held back for %s: %v", took, hold, tc.late)
			}
			p, _, err := direct.Get(key, nil)
			if err != nil || (p != nil) != tc.written {
				t.Fatalf("key after the txn: %+v, %v; want written: %v", p, err, tc.written)
			}
			f.Cut(false)
			if _, _, err := c.KV().Get(key, nil); err != nil {
				t.Fatalf("after the fault, the client still fails: %v", err)
			}
		})
	}
}
