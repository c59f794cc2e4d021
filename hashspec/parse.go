package hashspec

import (
	"fmt"
	"io"
	"os"
	"unicode/utf8"
)

// Parse decodes a spec strictly: unknown or duplicate fields, wrong
// types and bad durations are errors naming the field and line. It
// applies no defaults and does no validation, so callers may adjust the
// result before WithDefaults and Validate.
func Parse(data []byte, format Format, filename string) (*Spec, error) {
	if len(data) > MaxSpecBytes {
		return nil, &ParseError{Filename: filename, Msg: fmt.Sprintf("spec is larger than the %d-byte limit", MaxSpecBytes)}
	}
	if !utf8.Valid(data) {
		return nil, &ParseError{Filename: filename, Line: firstInvalidUTF8Line(data), Msg: "file is not valid UTF-8"}
	}
	switch format {
	case FormatJSON:
		return decodeJSON(data, filename)
	case FormatHCL:
		return decodeHCL(data, filename)
	}
	return nil, &ParseError{Filename: filename, Msg: fmt.Sprintf("unknown format %v", format)}
}

// ParseFile reads path (at most MaxSpecBytes of it) and parses it in the
// format its extension names.
func ParseFile(path string) (*Spec, error) {
	format, err := FormatFromPath(path)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// Read one byte past the limit so Parse sees an oversized file as
	// such without us ever holding more than that in memory.
	data, err := io.ReadAll(io.LimitReader(f, MaxSpecBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return Parse(data, format, path)
}

// Load is Parse, WithDefaults, Validate and SHA in one call: it returns
// the defaulted spec and its SHA. Validation errors are prefixed with
// filename and still unwrap to *ValidationError.
func Load(data []byte, format Format, filename string) (*Spec, string, error) {
	parsed, err := Parse(data, format, filename)
	if err != nil {
		return nil, "", err
	}
	s := parsed.WithDefaults()
	if err := s.Validate(); err != nil {
		return nil, "", fmt.Errorf("%s: %w", filename, err)
	}
	sha, err := s.SHA()
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", filename, err)
	}
	return &s, sha, nil
}

func firstInvalidUTF8Line(data []byte) int {
	line := 1
	for len(data) > 0 {
		r, n := utf8.DecodeRune(data)
		if r == utf8.RuneError && n <= 1 {
			return line
		}
		if r == '\n' {
			line++
		}
		data = data[n:]
	}
	return line
}
