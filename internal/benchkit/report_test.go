package benchkit

import (
	"os"
	"path/filepath"
	"testing"
)

func TestSplice(t *testing.T) {
	const b, e = "<!-- x: generated, begin -->", "<!-- x: generated, end -->"
	tests := []struct {
		name, text, want string
	}{
		{"empty file", "", b + "\nnew\n" + e + "\n"},
		{"no markers", "# Bench\n\nprose\n", "# Bench\n\nprose\n\n" + b + "\nnew\n" + e + "\n"},
		{"replaces the block only", "head\n" + b + "\nold\nrows\n" + e + "\ntail\n", "head\n" + b + "\nnew\n" + e + "\ntail\n"},
		{"end before begin is no block", e + "\n" + b + "\n", e + "\n" + b + "\n\n" + b + "\nnew\n" + e + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Splice(tt.text, b, e, "new\n"); got != tt.want {
				t.Fatalf("Splice(%q) =\n%q\nwant\n%q", tt.text, got, tt.want)
			}
		})
	}
}

func TestWriteKeepsOtherBlocks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "BENCH.md")
	for _, step := range []struct{ name, block string }{{"a", "A1"}, {"b", "B1"}, {"a", "A2"}} {
		if err := Write(path, step.name, step.block); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ab, ae := Markers("a")
	bb, be := Markers("b")
	want := ab + "\nA2\n" + ae + "\n\n" + bb + "\nB1\n" + be + "\n"
	if string(got) != want {
		t.Fatalf("file =\n%s\nwant\n%s", got, want)
	}
}
