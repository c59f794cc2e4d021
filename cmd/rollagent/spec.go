package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/rollagent/rollagent/hashspec"
)

// loadSpec reads a spec file ("-" for stdin, then JSON unless --format says
// otherwise), names it group when it names no group itself, validates it and
// returns it with defaults and its SHA. The name is part of the SHA, so a
// spec hashes the same whether or not its file spells the name out.
func loadSpec(path, format, group string) (*hashspec.Spec, string, error) {
	var (
		data []byte
		err  error
	)
	if path == "-" {
		data, err = io.ReadAll(io.LimitReader(os.Stdin, hashspec.MaxSpecBytes+1))
	} else {
		data, err = readLimited(path)
	}
	if err != nil {
		return nil, "", err
	}
	f, err := specFormat(path, format)
	if err != nil {
		return nil, "", err
	}
	spec, err := hashspec.Parse(data, f, path)
	if err != nil {
		if other, ok := otherFormat(data, f); ok {
			return nil, "", fmt.Errorf("%w (the input looks like %s: pass --format %s)", err, strings.ToUpper(other.String()), other)
		}
		return nil, "", err
	}
	if spec.Name == "" {
		spec.Name = group
	} else if group != "" && spec.Name != group {
		return nil, "", fmt.Errorf("%s names group %q, but the command says %q; nothing committed", path, spec.Name, group)
	}
	d := spec.WithDefaults()
	if err := d.Validate(); err != nil {
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	sha, err := d.SHA()
	return &d, sha, err
}

func specFormat(path, format string) (hashspec.Format, error) {
	switch format {
	case "json":
		return hashspec.FormatJSON, nil
	case "hcl":
		return hashspec.FormatHCL, nil
	}
	if path == "-" {
		return hashspec.FormatJSON, nil
	}
	return hashspec.FormatFromPath(path)
}

// otherFormat says whether data that failed to parse as f is rather in the
// other format: it parses as such, or it starts as only that format can, a
// JSON spec with "{" and an HCL one with anything else. Only the hint
// depends on it, never what is parsed.
func otherFormat(data []byte, f hashspec.Format) (hashspec.Format, bool) {
	other := hashspec.FormatHCL
	if f == hashspec.FormatHCL {
		other = hashspec.FormatJSON
	}
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return other, false
	}
	if _, err := hashspec.Parse(data, other, ""); err == nil {
		return other, true
	}
	looksJSON := trimmed[0] == '{'
	return other, looksJSON == (other == hashspec.FormatJSON)
}

// readLimited refuses a file larger than a spec may be before reading it.
func readLimited(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > hashspec.MaxSpecBytes {
		return nil, fmt.Errorf("%s: %d bytes is larger than the %d a spec may be", path, st.Size(), hashspec.MaxSpecBytes)
	}
	return io.ReadAll(io.LimitReader(f, hashspec.MaxSpecBytes+1))
}

// SpecFlags name a spec file.
type SpecFlags struct {
	File   string `short:"f" required:"" help:"Spec file (.json or .hcl), or - for stdin." type:"path"`
	Format string `enum:",json,hcl" default:"" help:"Spec format when the file name does not say (json|hcl)."`
}

// HashCmd prints a spec's SHA without talking to Consul.
type HashCmd struct {
	SpecFlags
	Group string `help:"Group the spec is for, when the file does not name it: the name is part of the SHA."`
	PinFlags
}

// warnings is where a command warns: stderr, beside its output on stdout.
type warnings struct{ io.Writer }

// Run prints the SHA, and only the SHA on stdout, for scripts. With
// --pin-digest it is the SHA that commit --pin-digest stores while the tag
// names the same image.
func (c *HashCmd) Run(ctx context.Context, g *Globals, out io.Writer, warn warnings) error {
	spec, sha, err := loadSpec(c.File, c.Format, c.Group)
	if err != nil {
		return err
	}
	if spec, sha, err = c.pin(ctx, spec, sha, g.Timeout); err != nil {
		return err
	}
	if msg := unnamedWarning(spec.Name, c.File); msg != "" {
		fmt.Fprintln(warn, msg)
	}
	_, err = fmt.Fprintln(out, sha)
	return err
}

// unnamedWarning says why the SHA of a spec that names no group matches no
// commit: commit always names the spec after its group (loadSpec), and the
// name is part of the SHA.
func unnamedWarning(name, path string) string {
	if name != "" {
		return ""
	}
	return fmt.Sprintf("rollagent: warning: %s names no group and --group is not given, so no commit produces this SHA: "+
		"`rollagent commit X` names the spec X, and `rollagent hash --group X` prints the SHA that commit stores", path)
}
