package hashspec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
)

// errSyntax aborts the JSON walk: after a syntax error the token stream
// cannot be trusted, so no further problems are reported.
var errSyntax = errors.New("json syntax error")

// jsonWalker checks the token stream against the Spec types before
// encoding/json sees it. encoding/json alone cannot do what we need: it
// names no path for unknown fields, matches keys case-insensitively,
// keeps the last of duplicate keys, and reports no line numbers.
type jsonWalker struct {
	dec      *json.Decoder
	data     []byte
	filename string
	present  map[string]bool // paths seen with a non-null value
	errs     []error
	// afterLine is the line of update.after, for an error found once
	// the whole spec is read (selfAfterError).
	afterLine int

	// Offsets only grow during the walk, so lines are counted
	// incrementally; recounting from 0 per error is quadratic.
	lineOff int64
	lineNum int
}

// maxDecodeErrors caps reported problems: a megabyte of unknown keys
// should produce a readable error, not a megabyte of them.
const maxDecodeErrors = 20

func decodeJSON(data []byte, filename string) (*Spec, error) {
	w := &jsonWalker{data: data, filename: filename, present: map[string]bool{}}
	w.dec = json.NewDecoder(bytes.NewReader(data))
	w.dec.UseNumber()
	if err := w.walkTop(); err != nil && !errors.Is(err, errSyntax) {
		return nil, err
	}
	if len(w.errs) > 0 {
		return nil, errors.Join(w.errs...)
	}
	var s Spec
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		// The walk accepted the input, so this is a bug in the walk.
		return nil, &ParseError{Filename: filename, Msg: "internal error: " + err.Error()}
	}
	if err := selfAfterError(&s, filename, w.afterLine); err != nil {
		return nil, err
	}
	s.markExplicitZeros(w.present)
	return &s, nil
}

func (w *jsonWalker) walkTop() error {
	tok, err := w.tokenOrEOF()
	if errors.Is(err, io.EOF) {
		w.fail("", "empty input; want a JSON object")
		return nil
	}
	if err != nil {
		return err
	}
	if tok != json.Delim('{') {
		w.fail("", "top level must be a JSON object, got %s", describe(tok))
		return nil
	}
	if err := w.walkStruct(reflect.TypeFor[Spec](), ""); err != nil {
		return err
	}
	if _, err := w.tokenOrEOF(); !errors.Is(err, io.EOF) {
		if err == nil {
			w.fail("", "unexpected data after the top-level object")
		}
		return err
	}
	return nil
}

// token reads the next token inside a value, where the end of input is
// a syntax error.
func (w *jsonWalker) token() (json.Token, error) {
	tok, err := w.tokenOrEOF()
	if errors.Is(err, io.EOF) {
		return nil, w.syntaxError(io.ErrUnexpectedEOF)
	}
	return tok, err
}

// tokenOrEOF reads the next token, turning a syntax error into a located
// ParseError (recorded) and errSyntax (returned). io.EOF passes through.
func (w *jsonWalker) tokenOrEOF() (json.Token, error) {
	tok, err := w.dec.Token()
	if err == nil || errors.Is(err, io.EOF) {
		return tok, err
	}
	return nil, w.syntaxError(err)
}

func (w *jsonWalker) syntaxError(err error) error {
	off := w.dec.InputOffset()
	var se *json.SyntaxError
	if errors.As(err, &se) {
		off = se.Offset
	}
	msg := "syntax error: " + strings.TrimPrefix(err.Error(), "json: ")
	if errors.Is(err, io.ErrUnexpectedEOF) {
		msg = "syntax error: unexpected end of input"
	}
	w.errs = append(w.errs, &ParseError{Filename: w.filename, Line: w.lineAt(off), Msg: msg})
	return errSyntax
}

func (w *jsonWalker) lineAt(off int64) int {
	off = min(max(off, 0), int64(len(w.data)))
	if off < w.lineOff {
		w.lineOff, w.lineNum = 0, 0
	}
	w.lineNum += bytes.Count(w.data[w.lineOff:off], []byte{'\n'})
	w.lineOff = off
	return 1 + w.lineNum
}

// fail records a problem and keeps walking, so one run reports several;
// past maxDecodeErrors the rest are only counted as "more".
func (w *jsonWalker) fail(field, format string, args ...any) {
	if len(w.errs) > maxDecodeErrors {
		return
	}
	if len(w.errs) == maxDecodeErrors {
		w.errs = append(w.errs, &ParseError{Filename: w.filename, Msg: "too many errors; the rest are not shown"})
		return
	}
	w.errs = append(w.errs, &ParseError{
		Filename: w.filename,
		Line:     w.lineAt(w.dec.InputOffset()),
		Field:    field,
		Msg:      fmt.Sprintf(format, args...),
	})
}

// jsonFields maps the exact JSON names of t's fields to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	fields := map[string]reflect.Type{}
	for i := range t.NumField() {
		sf := t.Field(i)
		name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if sf.IsExported() && name != "" && name != "-" {
			fields[name] = sf.Type
		}
	}
	return fields
}

// walkStruct walks an object whose '{' was already read.
func (w *jsonWalker) walkStruct(t reflect.Type, p string) error {
	fields := jsonFields(t)
	return w.walkObject(p, func(key string, val json.Token) error {
		fp := fieldPath(p, key)
		ft, ok := fields[key]
		if !ok {
			w.fail(fp, "unknown field")
			return w.skip(val)
		}
		w.present[fp] = val != nil
		if fp == pathAfter {
			w.afterLine = w.lineAt(w.dec.InputOffset())
		}
		return w.walkValue(ft, fp, val)
	})
}

// walkObject reads key/value pairs up to '}', rejecting duplicate keys
// because encoding/json would silently keep the last one.
func (w *jsonWalker) walkObject(p string, fn func(key string, val json.Token) error) error {
	seen := map[string]bool{}
	for {
		tok, err := w.token()
		if err != nil {
			return err
		}
		if tok == json.Delim('}') {
			return nil
		}
		key, _ := tok.(string)
		val, err := w.token()
		if err != nil {
			return err
		}
		if seen[key] {
			w.fail(keyPath(p, key), "duplicate key")
			if err := w.skip(val); err != nil {
				return err
			}
			continue
		}
		seen[key] = true
		if err := fn(key, val); err != nil {
			return err
		}
	}
}
