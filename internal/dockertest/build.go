package dockertest

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/client"
)

// ImageFromBinaries builds and tags an image with the Engine API's legacy
// builder, from an in-memory build context holding the Dockerfile and the
// given host files. files maps a path in the image ("/demoapp") to a host
// path; each file sits in the context at its image path without the leading
// slash, so the Dockerfile says `COPY demoapp /demoapp`. An empty dockerfile
// means FROM scratch plus one COPY per file. labels are added to the image
// by a LABEL instruction appended to the Dockerfile.
//
// It takes no testing.TB so that `make demo` can build the same images.
func ImageFromBinaries(ctx context.Context, cli *client.Client, tag string, files map[string]string, dockerfile string, labels map[string]string) error {
	if dockerfile == "" {
		dockerfile = scratchDockerfile(files)
	}
	labelLine, err := labelInstruction(labels)
	if err != nil {
		return fmt.Errorf("build %s: %w", tag, err)
	}
	dockerfile = strings.TrimRight(dockerfile, "\n") + "\n" + labelLine
	err = build1(ctx, cli, tag, files, dockerfile, false)
	if err != nil && ctx.Err() == nil {
		// Another process may have removed a cached layer this build was
		// reusing ("failed to get digest"): the same build without the
		// cache depends on no one else's images.
		err = build1(ctx, cli, tag, files, dockerfile, true)
	}
	return err
}

func build1(ctx context.Context, cli *client.Client, tag string, files map[string]string, dockerfile string, noCache bool) error {
	buildCtx, err := tarContext(files, dockerfile)
	if err != nil {
		return fmt.Errorf("build %s: %w", tag, err)
	}
	resp, err := cli.ImageBuild(ctx, buildCtx, build.ImageBuildOptions{
		Tags:        []string{tag},
		Dockerfile:  "Dockerfile",
		Remove:      true,
		ForceRemove: true,
		NoCache:     noCache,
		// BuildKit through this API wants a client session; the legacy
		// builder takes the tar as it is, and FROM scratch pulls nothing.
		Version: build.BuilderV1,
	})
	if err != nil {
		return fmt.Errorf("build %s: %w", tag, err)
	}
	defer resp.Body.Close()
	if err := readBuildStream(resp.Body); err != nil {
		return fmt.Errorf("build %s: %w", tag, err)
	}
	return nil
}

// labelInstruction puts all labels in one LABEL instruction. The builder's
// own Labels option costs a build step per label, each about a second here,
// and leaves intermediate images that carry the first label.
func labelInstruction(labels map[string]string) (string, error) {
	if len(labels) == 0 {
		return "", nil
	}
	var b strings.Builder
	b.WriteString("LABEL")
	for _, k := range sortedKeys(labels) {
		if k == "" || strings.ContainsAny(k, "=\r\n") {
			return "", fmt.Errorf("label name %q is not usable in a Dockerfile", k)
		}
		v, err := quoteWord(labels[k])
		if err != nil {
			return "", fmt.Errorf("label %s: %w", k, err)
		}
		kq, _ := quoteWord(k) // has no line break: checked above
		fmt.Fprintf(&b, " %s=%s", kq, v)
	}
	return b.String() + "\n", nil
}

// quoteWord quotes s for an ENV or LABEL instruction, where the builder
// would otherwise expand $VARS and split on spaces.
func quoteWord(s string) (string, error) {
	if strings.ContainsAny(s, "\r\n") {
		return "", errors.New("value has a line break, which a Dockerfile cannot hold")
	}
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, `$`, `\$`)
	return `"` + r.Replace(s) + `"`, nil
}

// contextPath is where an image path lives in the build context.
func contextPath(imagePath string) (string, error) {
	p := strings.TrimPrefix(path.Clean("/"+imagePath), "/")
	switch p {
	case "":
		return "", fmt.Errorf("image path %q names the root", imagePath)
	case "Dockerfile", ".dockerignore":
		return "", fmt.Errorf("image path %q would clash with the build context's %s", imagePath, p)
	}
	return p, nil
}

func scratchDockerfile(files map[string]string) string {
	var b strings.Builder
	b.WriteString("FROM scratch\n")
	for _, p := range sortedKeys(files) {
		cp, _ := contextPath(p) // tarContext reports a bad path
		fmt.Fprintf(&b, "COPY %s /%s\n", cp, cp)
	}
	return b.String()
}

// tarContext builds the whole context in memory: the binaries are a few MB
// and the legacy builder reads the context to the end before building anyway.
func tarContext(files map[string]string, dockerfile string) (io.Reader, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	// A fixed mtime keeps identical inputs identical, so the builder's cache
	// can reuse layers across runs.
	epoch := time.Unix(0, 0)
	if err := addTarFile(tw, "Dockerfile", 0o644, epoch, strings.NewReader(dockerfile), int64(len(dockerfile))); err != nil {
		return nil, err
	}
	for _, imagePath := range sortedKeys(files) {
		name, err := contextPath(imagePath)
		if err != nil {
			return nil, err
		}
		if err := addHostFile(tw, name, files[imagePath], epoch); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return &buf, nil
}

func addHostFile(tw *tar.Writer, name, hostPath string, mtime time.Time) error {
	f, err := os.Open(hostPath)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", hostPath)
	}
	return addTarFile(tw, name, int64(st.Mode().Perm()), mtime, f, st.Size())
}

func addTarFile(tw *tar.Writer, name string, mode int64, mtime time.Time, r io.Reader, size int64) error {
	hdr := &tar.Header{Name: name, Mode: mode, Size: size, ModTime: mtime, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	_, err := io.CopyN(tw, r, size)
	return err
}

// buildMessage is one line of the build's JSON stream. It is decoded here
// rather than with jsonmessage because the daemon may send the error only in
// the long-deprecated "error" field.
type buildMessage struct {
	Stream      string `json:"stream"`
	Error       string `json:"error"`
	ErrorDetail *struct {
		Message string `json:"message"`
	} `json:"errorDetail"`
	Aux json.RawMessage `json:"aux"`
}

// readBuildStream reads to the end, because the build goes on only while the
// stream is read, and returns the daemon's error with the output before it.
func readBuildStream(r io.Reader) error {
	dec := json.NewDecoder(r)
	var out strings.Builder
	built := false
	for {
		var m buildMessage
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return fmt.Errorf("reading build output: %w%s", err, outputTail(out.String()))
		}
		msg := m.Error
		if m.ErrorDetail != nil && m.ErrorDetail.Message != "" {
			msg = m.ErrorDetail.Message
		}
		if msg != "" {
			return fmt.Errorf("%s%s", strings.TrimSpace(msg), outputTail(out.String()))
		}
		out.WriteString(m.Stream)
		built = built || len(m.Aux) > 0 || strings.HasPrefix(m.Stream, "Successfully built ")
	}
	if !built {
		return fmt.Errorf("build output ended without success%s", outputTail(out.String()))
	}
	return nil
}

// outputTail keeps the last lines of build output for an error message: the
// failing step is near the end, and a whole log would drown it.
func outputTail(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) == 1 && lines[0] == "" {
		return ""
	}
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return "\nbuild output (tail):\n  " + strings.Join(lines, "\n  ")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
