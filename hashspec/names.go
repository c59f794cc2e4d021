package hashspec

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

const maxNameLen = 63

// ValidateName checks a group or node name. Names end up in Consul keys,
// container names and file paths, so they are restricted to 1..63 ASCII
// letters, digits, '_', '.' and '-', starting and ending with a letter or
// digit, with no "..": that rules out path traversal, separators and
// Unicode look-alikes of legitimate names.
func ValidateName(name string) error {
	if msg := nameProblem(name); msg != "" {
		return fmt.Errorf("invalid name %s: %s", quoteShort(name), msg)
	}
	return nil
}

// nameProblem returns "" for a valid name, else what is wrong with it.
// Non-ASCII is checked before length so a look-alike is named as such.
func nameProblem(name string) string {
	if name == "" {
		return "must not be empty"
	}
	for i, r := range name {
		if r >= utf8.RuneSelf {
			return fmt.Sprintf("must be ASCII only; found %q (U+%04X) at byte %d", r, r, i)
		}
	}
	if len(name) > maxNameLen {
		return fmt.Sprintf("must be at most %d characters, got %d", maxNameLen, len(name))
	}
	if strings.Contains(name, "..") {
		return `must not contain ".."`
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !isAlnum(c) && c != '_' && c != '.' && c != '-' {
			return fmt.Sprintf("invalid character %q at position %d (allowed: ASCII letters, digits, '_', '.', '-')", c, i)
		}
	}
	if !isAlnum(name[0]) {
		return fmt.Sprintf("must start with a letter or digit, got %q", name[0])
	}
	if !isAlnum(name[len(name)-1]) {
		return fmt.Sprintf("must end with a letter or digit, got %q", name[len(name)-1])
	}
	return ""
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// quoteShort quotes s for a message, eliding the middle of very long
// input so one bad name cannot flood a log line.
func quoteShort(s string) string {
	const keep = 40
	if len(s) <= 2*keep {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q...%q (%d bytes)", s[:keep], s[len(s)-keep:], len(s))
}
