package hashspec

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// ErrTooLargeToCommit means a spec's canonical encoding is over
// MaxCommitBytes; the error that wraps it gives both sizes.
var ErrTooLargeToCommit = errors.New("spec too large to commit")

// CheckCommitSize returns an error wrapping ErrTooLargeToCommit when canon,
// a canonical encoding, is larger than a commit may store.
func CheckCommitSize(canon []byte) error {
	if len(canon) <= MaxCommitBytes {
		return nil
	}
	return fmt.Errorf("%w: its canonical encoding (what a commit stores) is %d bytes, over the %d bytes (%d KiB) that fit in one Consul transaction",
		ErrTooLargeToCommit, len(canon), MaxCommitBytes, MaxCommitBytes>>10)
}

// FieldError is one problem with one field. Field is a dotted path using
// the JSON names ("update.max_parallel", "container.env.FOO",
// "container.ports[1].container"), for HCL files too, so a message means
// the same thing whichever format the spec came in.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string {
	if e.Field == "" {
		return e.Msg
	}
	return e.Field + ": " + e.Msg
}

// ValidationError lists every problem Validate found, so a user can fix
// a spec in one round trip instead of one error at a time.
type ValidationError struct {
	Errors []*FieldError
}

func (e *ValidationError) Error() string {
	msgs := make([]string, len(e.Errors))
	for i, fe := range e.Errors {
		msgs[i] = fe.Error()
	}
	return strings.Join(msgs, "; ")
}

// Unwrap lets errors.As reach the individual *FieldError values.
func (e *ValidationError) Unwrap() []error {
	errs := make([]error, len(e.Errors))
	for i, fe := range e.Errors {
		errs[i] = fe
	}
	return errs
}

// ParseError is a decode failure (syntax, wrong type, unknown or
// duplicate field, bad duration) located in the input file.
type ParseError struct {
	Filename string
	Line     int    // 1-based; 0 when unknown
	Field    string // dotted path as in FieldError; "" for pure syntax errors
	Msg      string
}

func (e *ParseError) Error() string {
	var b strings.Builder
	b.WriteString(e.Filename)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap exposes the field as a *FieldError so callers can use one
// errors.As for decode and validation problems alike.
func (e *ParseError) Unwrap() error {
	if e.Field == "" {
		return nil
	}
	return &FieldError{Field: e.Field, Msg: e.Msg}
}

// plainKey matches map keys that read unambiguously in a dotted path;
// anything else is quoted so odd keys (spaces, NUL, "") stay visible.
var plainKey = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.\-/]*$`)

func fieldPath(parent, name string) string {
	if parent == "" {
		return name
	}
	return parent + "." + name
}

func indexPath(parent string, i int) string {
	return parent + "[" + strconv.Itoa(i) + "]"
}

func keyPath(parent, key string) string {
	if plainKey.MatchString(key) {
		return fieldPath(parent, key)
	}
	return parent + "[" + strconv.Quote(key) + "]"
}
