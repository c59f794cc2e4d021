package consultest

import (
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"
)

func tlsClient(t *testing.T, addr, caFile string) *api.Client {
	t.Helper()
	cfg := api.DefaultConfig()
	cfg.Address = addr
	cfg.TLSConfig = api.TLSConfig{CAFile: caFile}
	c, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The HTTPS listener verifies against its own CA and no other.
func TestNewDevTLS(t *testing.T) {
	_, addr, x := NewDevTLS(t)
	if !strings.HasPrefix(addr, "https://") {
		t.Fatalf("address %q is not https", addr)
	}
	if leader, err := tlsClient(t, addr, x.CAFile).Status().Leader(); err != nil || leader == "" {
		t.Fatalf("with the CA: leader %q, %v", leader, err)
	}
	other := NewTLS(t)
	_, err := tlsClient(t, addr, other.CAFile).Status().Leader()
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("with another CA: %v, want a certificate error", err)
	}
}
