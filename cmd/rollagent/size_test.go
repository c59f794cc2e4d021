package main

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/consultest"
)

// sizedSpec returns a JSON spec for group web whose canonical encoding is
// exactly size bytes, padded with an environment variable.
func sizedSpec(t *testing.T, size int) []byte {
	t.Helper()
	body := func(pad int) []byte {
		return fmt.Appendf(nil, `{"name":"web","container":{"image":"x:1","env":{"PAD":"%s"}}}`, strings.Repeat("a", pad))
	}
	spec, err := hashspec.Parse(body(0), hashspec.FormatJSON, "sized")
	if err != nil {
		t.Fatal(err)
	}
	canon, err := spec.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	out := body(size - len(canon))
	spec, err = hashspec.Parse(out, hashspec.FormatJSON, "sized")
	if err != nil {
		t.Fatal(err)
	}
	if canon, err = spec.Canonical(); err != nil || len(canon) != size {
		t.Fatalf("canonical encoding of %d bytes (%v), want %d", len(canon), err, size)
	}
	return out
}

// A spec at the commit limit commits on a real Consul; one byte more is
// refused before any write, with both sizes in the error.
func TestSpecSizeLimitCommitsOnConsul(t *testing.T) {
	srv := consultest.NewDev(t)
	limit := strconv.Itoa(hashspec.MaxCommitBytes)
	t.Run("one byte over is refused", func(t *testing.T) {
		path := writeSpec(t, "over.json", sizedSpec(t, hashspec.MaxCommitBytes+1))
		errs := refused(t, srv, "is "+strconv.Itoa(hashspec.MaxCommitBytes+1)+" bytes", "commit", "web", "-f", path)
		if !strings.Contains(errs, limit) || !strings.Contains(errs, "nothing committed") {
			t.Fatalf("stderr %q does not give the limit %s and say nothing was committed", errs, limit)
		}
	})
	t.Run("at the limit commits", func(t *testing.T) {
		// A long author makes the transaction's other records larger than
		// a commit's usually are.
		path := writeSpec(t, "at.json", sizedSpec(t, hashspec.MaxCommitBytes))
		code, out, errs := runCLI(t, srv.HTTPAddr, "commit", "web", "-f", path, "--author", strings.Repeat("x", 4096))
		if code != 0 || !strings.Contains(out, "committed to group web") {
			t.Fatalf("commit at the limit: code %d out %q err %q", code, out, errs)
		}
	})
}
