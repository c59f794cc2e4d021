package coordinator

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

// Every read of the store refuses a server that answers 404 without
// X-Consul-Index, and names its address, rather than taking it for a
// Consul with nothing committed.
func TestReadsRefuseAServerThatIsNotConsul(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	cfg := api.DefaultConfig()
	cfg.Address = srv.URL
	c, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	st := NewStore(c, "")
	st.SetAddress(srv.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reads := map[string]func() error{
		"Read":    func() error { _, err := st.Read(ctx, "web", nil); return err },
		"ReadFor": func() error { _, err := st.ReadFor(ctx, "web", "n1"); return err },
		"Get":     func() error { _, _, err := st.Get(ctx, "rollagent/groups/web/desired", nil); return err },
		"Cancel":  func() error { _, err := st.Cancel(ctx, "web", "", "", "t"); return err },
		"Resume":  func() error { _, err := st.Resume(ctx, "web"); return err },
	}
	for name, read := range reads {
		t.Run(name, func(t *testing.T) {
			err := read()
			if !errors.Is(err, ErrNotConsul) || !strings.Contains(err.Error(), srv.URL+" answered but is not a Consul HTTP API") {
				t.Fatalf("error %v, want ErrNotConsul naming %s", err, srv.URL)
			}
			if IsTransient(err) {
				t.Fatal("a server that is not Consul is not an outage that passes")
			}
		})
	}
}
