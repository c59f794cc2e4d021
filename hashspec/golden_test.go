package hashspec

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Run `go test ./hashspec -run TestGolden -update` to rewrite the .sha256
// files. Only do that for a new spec file or together with a new
// shaPrefix: a changed SHA for an existing file means every deployed
// group would roll.
var update = flag.Bool("update", false, "rewrite testdata/golden/*.sha256")

func goldenSpecs(t testing.TB) []string {
	t.Helper()
	var files []string
	for _, pat := range []string{"*.json", "*.hcl"} {
		m, err := filepath.Glob(filepath.Join("testdata", "golden", pat))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) == 0 {
		t.Fatal("no golden specs found")
	}
	return files
}

func TestGolden(t *testing.T) {
	byStem := map[string]string{}
	for _, path := range goldenSpecs(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			got, canonical := goldenSHA(t, path)
			checkGolden(t, path+".sha256", got, canonical)
			stem := strings.TrimSuffix(path, filepath.Ext(path))
			if other, ok := byStem[stem]; ok && other != got {
				t.Errorf("%s: the .json and .hcl forms must hash equal: %s vs %s", stem, other, got)
			}
			byStem[stem] = got
		})
	}
}

func goldenSHA(t *testing.T, path string) (sha, canonical string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	format, err := FormatFromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	s, sha, err := Load(data, format, path)
	if err != nil {
		t.Fatalf("golden spec must load: %v", err)
	}
	c, err := s.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	return sha, string(c)
}

func checkGolden(t *testing.T, path, got, canonical string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("missing golden SHA (run with -update for a NEW spec file): %v", err)
	}
	if w := strings.TrimSpace(string(want)); w != got {
		t.Fatalf("SHA changed: got %s, golden %s.\ncanonical now: %s\n"+
			"The canonical encoding changed. That re-rolls every group: bump shaPrefix instead of rewriting goldens.", got, w, canonical)
	}
}

func parseGolden(t *testing.T, name string, format Format) *Spec {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "golden", name))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Parse(data, format, name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
