package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/consul/api"
)

var (
	// ErrNotConsul means the server at the address answered HTTP, but not
	// as Consul does: every KV read of a real Consul carries X-Consul-Index,
	// even a 404. Read as Consul, such a server looks like an empty one.
	ErrNotConsul = errors.New("answered but is not a Consul HTTP API")
	// ErrACLDenied means the token may not read or write a key it needs.
	// Consul answers a denied read of one key with a 403, but leaves keys out
	// of a listing, and for a request with no token it does not even say so
	// (it masks X-Consul-Results-Filtered-By-ACLs for anonymous requests):
	// such a listing must not pass for a group with nothing committed.
	ErrACLDenied = errors.New("consul: permission denied")
	// ErrGateUnread is a read of a group that could not take what its gate
	// is judged on (a folder of brakes or failures over the size a reader
	// accepts): the reader must act as if the gate were closed.
	ErrGateUnread = errors.New("coordinator: what the gate is judged on could not be read")
	// ErrNoDomain is a node whose topology domain (update.max_parallel_per)
	// cannot be told: its Consul node is not in the catalog.
	ErrNoDomain = errors.New("coordinator: the node's domain cannot be told")
)

// SetAddress names the Consul address in the errors the store returns when
// what answered there is not Consul; api.Client does not tell its address.
func (s *Store) SetAddress(addr string) { s.addr = addr }

// address is the server's address for an error message.
func (s *Store) address() string {
	if s.addr == "" {
		return "the server"
	}
	return s.addr
}

// Get reads one key and checks that the answer came from Consul. Every KV
// read goes through Get or list, so that a server that is not Consul is
// named, not taken for an empty Consul.
func (s *Store) Get(ctx context.Context, key string, q *api.QueryOptions) (*api.KVPair, *api.QueryMeta, error) {
	if q == nil {
		q = &api.QueryOptions{}
	}
	p, meta, err := s.c.KV().Get(key, q.WithContext(ctx))
	if err != nil {
		return nil, nil, s.readError(err, key)
	}
	if err := s.checkMeta(ctx, meta); err != nil {
		return nil, nil, err
	}
	return p, meta, nil
}

// list reads a tree as Get reads a key. A listing Consul says it filtered
// is an error; one it may have filtered without saying (no token) is
// checked by the caller, which knows which key must be there.
func (s *Store) list(ctx context.Context, prefix string, q *api.QueryOptions) (api.KVPairs, *api.QueryMeta, error) {
	if q == nil {
		q = &api.QueryOptions{}
	}
	pairs, meta, err := s.c.KV().List(prefix, q.WithContext(ctx))
	if err != nil {
		return nil, nil, s.readError(err, prefix)
	}
	if err := s.checkMeta(ctx, meta); err != nil {
		return nil, nil, err
	}
	if meta.ResultsFilteredByACLs {
		return nil, nil, fmt.Errorf("%w: the token may not read everything under %s, so Consul left keys out of the listing", ErrACLDenied, prefix)
	}
	return pairs, meta, nil
}

// checkMeta refuses an answer without X-Consul-Index, and asks
// /v1/status/leader so that the error says whether that failed too.
func (s *Store) checkMeta(ctx context.Context, meta *api.QueryMeta) error {
	if meta.LastIndex != 0 {
		return nil
	}
	why := "no X-Consul-Index on a KV read"
	_, err := s.c.Status().LeaderWithQueryOptions((&api.QueryOptions{}).WithContext(ctx))
	var status api.StatusError
	switch {
	case errors.As(err, &status):
		// Not the body: a web server's error page is no use in a log line.
		why += fmt.Sprintf(", and HTTP %d on /v1/status/leader", status.Code)
	case err != nil:
		why += ", and /v1/status/leader failed: " + rootCause(err).Error()
	}
	return fmt.Errorf("%s %w (%s)", s.address(), ErrNotConsul, why)
}

// readError is consulError, naming key when the token may not read it.
func (s *Store) readError(err error, key string) error {
	err = consulError(s.c, err)
	if errors.Is(err, ErrACLDenied) && !strings.Contains(err.Error(), key) {
		return fmt.Errorf("%w (reading %s)", err, key)
	}
	return err
}

// probeDenied tells a listing that came back without key because the
// token may not read it from one where key does not exist: a read of the
// one key is refused with a 403 where a listing is quietly filtered.
func (s *Store) probeDenied(ctx context.Context, key string) error {
	_, _, err := s.Get(ctx, key, nil)
	return err
}
