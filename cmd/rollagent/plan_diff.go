package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/rollagent/rollagent/hashspec"
)

// FieldChange kinds: how a field of the spec differs from the desired one.
const (
	FieldChanged = "changed"
	FieldAdded   = "added"
	FieldRemoved = "removed"
)

// fieldChange is one field whose value differs between two specs.
type fieldChange struct {
	Path   string `json:"path"`
	Change string `json:"change"`
	Old    any    `json:"old,omitempty"`
	New    any    `json:"new,omitempty"`
}

// specDiff is the difference between two specs, field by field, over
// their canonical forms: the defaults filled in and every value written
// one way, so that specs with one SHA show no difference, and every
// difference shown is one the SHA covers. old nil is a first commit.
func specDiff(old, new *hashspec.Spec) ([]fieldChange, error) {
	var a, b any
	if old != nil {
		var err error
		if a, err = canonicalTree(old); err != nil {
			return nil, fmt.Errorf("desired spec: %w", err)
		}
	}
	b, err := canonicalTree(new)
	if err != nil {
		return nil, err
	}
	var out []fieldChange
	walkDiff("", a, old != nil, b, true, &out)
	return out, nil
}

// canonicalTree decodes a spec's canonical encoding into maps, lists and
// json.Numbers, for walkDiff.
func canonicalTree(s *hashspec.Spec) (any, error) {
	c, err := s.Canonical()
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(c))
	dec.UseNumber()
	var v any
	return v, dec.Decode(&v)
}

// walkDiff appends to out the leaves that differ between a and b under
// path; hasA and hasB say whether the field exists on each side, so that
// a field added or removed whole is named leaf by leaf.
func walkDiff(path string, a any, hasA bool, b any, hasB bool, out *[]fieldChange) {
	am, aMap := a.(map[string]any)
	bm, bMap := b.(map[string]any)
	al, aList := a.([]any)
	bl, bList := b.([]any)
	switch {
	case (aMap || !hasA) && (bMap || !hasB) && (len(am) > 0 || len(bm) > 0):
		keys := make([]string, 0, len(am)+len(bm))
		for k := range am {
			keys = append(keys, k)
		}
		for k := range bm {
			if _, ok := am[k]; !ok {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			va, okA := am[k]
			vb, okB := bm[k]
			walkDiff(join(path, k), va, okA, vb, okB, out)
		}
	case (aList || !hasA) && (bList || !hasB) && (len(al) > 0 || len(bl) > 0):
		for i := range max(len(al), len(bl)) {
			var va, vb any
			if i < len(al) {
				va = al[i]
			}
			if i < len(bl) {
				vb = bl[i]
			}
			walkDiff(fmt.Sprintf("%s[%d]", path, i), va, i < len(al), vb, i < len(bl), out)
		}
	case !hasA && hasB:
		*out = append(*out, fieldChange{Path: path, Change: FieldAdded, New: b})
	case hasA && !hasB:
		*out = append(*out, fieldChange{Path: path, Change: FieldRemoved, Old: a})
	case hasA && hasB && !sameJSON(a, b):
		*out = append(*out, fieldChange{Path: path, Change: FieldChanged, Old: a, New: b})
	}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func sameJSON(a, b any) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
}

// policyOnly says every change is to the update policy (update.*).
func policyOnly(changes []fieldChange) bool {
	for _, c := range changes {
		if !strings.HasPrefix(c.Path, "update.") {
			return false
		}
	}
	return len(changes) > 0
}

// String is the change on one line: "container.image: web:1 → web:2",
// "update.stagger: 30s (added)".
func (c fieldChange) String() string {
	switch c.Change {
	case FieldAdded:
		return fmt.Sprintf("%s: %s (added)", c.Path, diffValue(c.New))
	case FieldRemoved:
		return fmt.Sprintf("%s: %s (removed)", c.Path, diffValue(c.Old))
	}
	return fmt.Sprintf("%s: %s → %s", c.Path, diffValue(c.Old), diffValue(c.New))
}

// diffValue writes a value as JSON, but a string bare when it reads the
// same bare (no space, quote or arrow), as an image or a duration does.
func diffValue(v any) string {
	if s, ok := v.(string); ok && s != "" && !strings.ContainsAny(s, " \"→,") && cell(s) == s {
		return s
	}
	b, err := json.Marshal(v)
	if err != nil {
		return strconv.Quote(fmt.Sprint(v))
	}
	return cell(string(b))
}
