// Package benchmd writes a benchmark's generated Markdown into a committed
// report, such as BENCHMARKS.md, between two markers, so that a run
// refreshes its own block and leaves the rest of the file alone.
package benchmd

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// Markers returns the begin and end markers of the block named name.
func Markers(name string) (begin, end string) {
	return fmt.Sprintf("<!-- %s: generated, begin -->", name), fmt.Sprintf("<!-- %s: generated, end -->", name)
}

// Splice returns text with block between begin and end, in place of what
// was there, or appended with both markers when they are missing.
func Splice(text, begin, end, block string) string {
	block = begin + "\n" + strings.TrimRight(block, "\n") + "\n" + end
	i := strings.Index(text, begin)
	if i >= 0 {
		if j := strings.Index(text[i:], end); j >= 0 {
			return text[:i] + block + text[i+j+len(end):]
		}
	}
	if text = strings.TrimRight(text, "\n"); text != "" {
		text += "\n\n"
	}
	return text + block + "\n"
}

// Write splices the block named name into the file at path, creating the
// file if it does not exist.
func Write(path, name, block string) error {
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	begin, end := Markers(name)
	return os.WriteFile(path, []byte(Splice(string(old), begin, end, block)), 0o644)
}
