package coordinator

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/hashicorp/consul/api"
)

// UnreachableError says Consul could not be reached at all, as opposed to
// Consul answering with an error.
type UnreachableError struct {
	Addr string
	Err  error
	// Sent says the connection was made, so the request may have reached
	// Consul and been applied, its answer lost; false when it failed to
	// connect.
	Sent bool
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("cannot reach Consul at %s: %v", e.Addr, e.Err)
}
func (e *UnreachableError) Unwrap() error { return e.Err }

// consulError names the address when the network failed, so that an
// operator sees where rollagent was looking.
func consulError(c *api.Client, err error) error {
	var uerr *url.Error
	var nerr net.Error
	if errors.As(err, &uerr) || errors.As(err, &nerr) {
		addr := "?"
		if uerr != nil {
			if u, perr := url.Parse(uerr.URL); perr == nil {
				addr = u.Scheme + "://" + u.Host
			}
		}
		// Not an outage: retrying will not make the certificate trusted.
		var cerr *tls.CertificateVerificationError
		if errors.As(err, &cerr) {
			return fmt.Errorf("TLS: the certificate of Consul at %s is not trusted: %w (CONSUL_CACERT names the CA to trust)", addr, cerr.Err)
		}
		var op *net.OpError
		sent := !errors.As(err, &op) || op.Op != "dial"
		return &UnreachableError{Addr: addr, Err: rootCause(err), Sent: sent}
	}
	if sc, ok := err.(api.StatusError); ok && sc.Code == 403 {
		// Consul's body names the token and the key it lacks rights on.
		body := strings.TrimSpace(sc.Body)
		if strings.HasPrefix(strings.ToLower(body), "permission denied") {
			body = strings.TrimLeft(body[len("permission denied"):], ": ")
		}
		if body == "" {
			return ErrACLDenied
		}
		return fmt.Errorf("%w: %s", ErrACLDenied, body)
	}
	return fmt.Errorf("consul: %w", err)
}

func rootCause(err error) error {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err
		}
		err = u
	}
}

func isDenied(what string) bool { return strings.Contains(strings.ToLower(what), "permission denied") }

// IsTransient reports whether err may go away if the same call is made
// again: Consul out of reach, Consul answering that it cannot serve now (a
// 5xx, such as no cluster leader, or 429), or ErrConflict, writers that kept
// winning the race. Anything else, a denial or a record that does not
// decode, is an answer that a retry would get again.
func IsTransient(err error) bool {
	var unreachable *UnreachableError
	var status api.StatusError
	switch {
	case errors.As(err, &unreachable), errors.Is(err, ErrConflict):
		return true
	case errors.As(err, &status):
		return status.Code >= 500 || status.Code == 429
	}
	return false
}
