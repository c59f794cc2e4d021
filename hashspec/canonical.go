package hashspec

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// shaPrefix versions the canonical encoding. Any change to how a spec is
// encoded changes every SHA, so it must come with a new prefix.
const shaPrefix = "rollagent.spec.v1\n"

var durationType = reflect.TypeFor[Duration]()

// Canonical applies defaults, validates, and returns the canonical JSON
// encoding described in the package documentation.
func (s *Spec) Canonical() ([]byte, error) {
	d := s.WithDefaults()
	if err := d.Validate(); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if err := encodeCanonical(&b, reflect.ValueOf(d)); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// SHA returns the lowercase hex SHA-256 of the version prefix followed by
// the canonical encoding.
func (s *Spec) SHA() (string, error) {
	c, err := s.Canonical()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	h.Write([]byte(shaPrefix))
	h.Write(c)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// encodeCanonical is a deliberately small JSON writer: it is ours rather
// than encoding/json so that a change in the standard library's escaping
// or ordering can never change a SHA.
func encodeCanonical(b *bytes.Buffer, v reflect.Value) error {
	if v.Type() == durationType {
		writeString(b, v.Interface().(Duration).String())
		return nil
	}
	if v.Type() == amountType {
		// A count is the number it was before percentages: its SHA stays.
		if a := v.Interface().(Amount); a.IsPercent() {
			writeString(b, a.String())
		} else {
			b.WriteString(strconv.Itoa(a.Count))
		}
		return nil
	}
	switch v.Kind() {
	case reflect.String:
		writeString(b, v.String())
	case reflect.Int:
		b.WriteString(strconv.FormatInt(v.Int(), 10))
	case reflect.Bool:
		b.WriteString(strconv.FormatBool(v.Bool()))
	case reflect.Pointer:
		if v.IsNil() {
			b.WriteString("null")
			return nil
		}
		return encodeCanonical(b, v.Elem())
	case reflect.Slice:
		return encodeSlice(b, v)
	case reflect.Map:
		return encodeMap(b, v)
	case reflect.Struct:
		return encodeStruct(b, v)
	default:
		return fmt.Errorf("hashspec: cannot encode %s canonically", v.Type())
	}
	return nil
}

func encodeSlice(b *bytes.Buffer, v reflect.Value) error {
	b.WriteByte('[')
	for i := range v.Len() {
		if i > 0 {
			b.WriteByte(',')
		}
		if err := encodeCanonical(b, v.Index(i)); err != nil {
			return err
		}
	}
	b.WriteByte(']')
	return nil
}

// encodeMap writes keys in byte-wise (Go string) order.
func encodeMap(b *bytes.Buffer, v reflect.Value) error {
	keys := v.MapKeys()
	slices.SortFunc(keys, func(x, y reflect.Value) int { return strings.Compare(x.String(), y.String()) })
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		writeString(b, k.String())
		b.WriteByte(':')
		if err := encodeCanonical(b, v.MapIndex(k)); err != nil {
			return err
		}
	}
	b.WriteByte('}')
	return nil
}

// encodeStruct writes exported fields in declaration order under their
// json tag names, honouring omitempty.
func encodeStruct(b *bytes.Buffer, v reflect.Value) error {
	b.WriteByte('{')
	first := true
	for i := range v.NumField() {
		sf := v.Type().Field(i)
		name, opts, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if !sf.IsExported() || name == "-" || name == "" {
			continue
		}
		fv := v.Field(i)
		if opts == "omitempty" && isEmpty(fv) {
			continue
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		writeString(b, name)
		b.WriteByte(':')
		if err := encodeCanonical(b, fv); err != nil {
			return err
		}
	}
	b.WriteByte('}')
	return nil
}

func isEmpty(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Slice, reflect.Map:
		return v.Len() == 0
	case reflect.Pointer:
		return v.IsNil()
	default:
		return v.IsZero()
	}
}

// writeString escapes only what JSON requires ('"', '\\', control
// characters); everything else is written as raw UTF-8, which Validate
// has already guaranteed is valid.
func writeString(b *bytes.Buffer, s string) {
	const hexDigits = "0123456789abcdef"
	b.WriteByte('"')
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\r':
			b.WriteString(`\r`)
		case c == '\t':
			b.WriteString(`\t`)
		case c < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&0xf])
		case c < utf8.RuneSelf:
			b.WriteByte(c)
		default:
			_, n := utf8.DecodeRuneInString(s[i:])
			b.WriteString(s[i : i+n])
			i += n
			continue
		}
		i++
	}
	b.WriteByte('"')
}
