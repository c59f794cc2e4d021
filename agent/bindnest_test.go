package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rollagent/rollagent/hashspec"
)

// A bind source looked up through a directory that the spec mounts
// read-write could be turned into a symlink by the container before its
// next start; the same source, a read-only parent or a sibling could not.
func TestAllowCheckRefusesNestedBinds(t *testing.T) {
	root := t.TempDir()
	p := filepath.Join(root, "srv")
	for _, d := range []string{"x/y", "a", "b", "sub"} {
		if err := os.MkdirAll(filepath.Join(p, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A link outside the writable tree that leads into it.
	if err := os.Symlink(filepath.Join(p, "sub"), filepath.Join(root, "via")); err != nil {
		t.Fatal(err)
	}
	rw := func(src, target string) hashspec.Volume {
		return hashspec.Volume{Type: "bind", Source: src, Target: target}
	}
	ro := func(src, target string) hashspec.Volume {
		return hashspec.Volume{Type: "bind", Source: src, Target: target, ReadOnly: true}
	}
	at := func(rel string) string { return filepath.Join(p, rel) }
	tests := []struct {
		name    string
		vols    []hashspec.Volume
		wantErr string
	}{
		{"one bind", []hashspec.Volume{rw(p, "/web")}, ""},
		{"child of a read-write bind", []hashspec.Volume{rw(p, "/web"), ro(at("x"), "/x")}, "lies inside " + p},
		{"child listed first", []hashspec.Volume{rw(at("x"), "/x"), rw(p, "/web")}, "lies inside " + p},
		{"grandchild", []hashspec.Volume{rw(p, "/web"), ro(at("x/y"), "/y")}, "lies inside " + p},
		{"child that does not exist yet", []hashspec.Volume{rw(p, "/web"), ro(at("new/dir"), "/n")}, "lies inside"},
		{"through a link outside that leads in", []hashspec.Volume{rw(p, "/web"), ro(filepath.Join(root, "via", "f"), "/f")}, "lies inside"},
		{"dot-dot back into it", []hashspec.Volume{rw(at("a"), "/a"), ro(at("b/../a/z"), "/z")}, "lies inside"},
		{"child of a read-only bind", []hashspec.Volume{ro(p, "/web"), ro(at("x"), "/x")}, ""},
		{"read-write child of a read-only bind", []hashspec.Volume{ro(p, "/web"), rw(at("x"), "/x")}, ""},
		{"the same source twice", []hashspec.Volume{rw(p, "/web"), ro(p, "/web2")}, ""},
		{"siblings", []hashspec.Volume{rw(at("a"), "/a"), rw(at("b"), "/b")}, ""},
		{"a sibling sharing the name's start", []hashspec.Volume{rw(at("x"), "/x"), ro(at("x2"), "/x2")}, ""},
	}
	allow := Allow{BindPrefixes: []string{root}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := allow.Check(&hashspec.Spec{Container: hashspec.Container{Image: "web:1", Volumes: tt.vols}})
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Check = %v, want allowed", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Check = %v, want an error mentioning %q", err, tt.wantErr)
			}
		})
	}
}

func TestLookupDirs(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "real", "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real/d", filepath.Join(root, "rel")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "loop"), filepath.Join(root, "loop")); err != nil {
		t.Fatal(err)
	}
	dirs, err := lookupDirs(filepath.Join(root, "rel", "f"))
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(dirs, " ")
	for _, want := range []string{root, filepath.Join(root, "real"), filepath.Join(root, "real", "d")} {
		if !strings.Contains(" "+got+" ", " "+want+" ") {
			t.Errorf("lookupDirs = %v, want %s among them", dirs, want)
		}
	}
	if _, err := lookupDirs(filepath.Join(root, "loop", "x")); err == nil || !strings.Contains(err.Error(), "symbolic links") {
		t.Errorf("lookupDirs of a loop = %v, want a loop error", err)
	}
}
