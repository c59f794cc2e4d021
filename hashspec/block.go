package hashspec

import (
	"cmp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Block is a Consul health condition that must be passing before a node
// is granted a replacement slot: a service's checks (only the instances
// with Tag, when set) or every check of a name (its CheckID or Name).
// Exactly one of Service and Check is set.
type Block struct {
	Service string `json:"service,omitempty"`
	// Tag narrows Service to its instances with this tag; optional.
	Tag   string `json:"tag,omitempty"`
	Check string `json:"check,omitempty"`
}

// MaxBlockNameLen bounds a service, tag or check name in a Block.
const MaxBlockNameLen = 256

// Blocks says whether u blocks on any Consul check, cluster-wide or on
// the node.
func (u *Update) Blocks() bool { return len(u.BlockOn) > 0 || len(u.BlockOnNode) > 0 }

// String names the block as a person would: `service "db" tag "primary"`
// or `check "disk"`.
func (b Block) String() string {
	if b.Service == "" {
		return "check " + quoteShort(b.Check)
	}
	s := "service " + quoteShort(b.Service)
	if b.Tag != "" {
		s += " tag " + quoteShort(b.Tag)
	}
	return s
}

// normalBlocks sorts blocks and drops repeats, so specs that list the
// same blocks in any order share a SHA.
func normalBlocks(bs []Block) []Block {
	if len(bs) == 0 {
		return nil
	}
	out := slices.Clone(bs)
	slices.SortFunc(out, func(a, b Block) int {
		return cmp.Or(strings.Compare(a.Service, b.Service), strings.Compare(a.Tag, b.Tag), strings.Compare(a.Check, b.Check))
	})
	return slices.Compact(out)
}

func (c *checker) blocks(path string, bs []Block) {
	for i, b := range bs {
		f := indexPath(path, i)
		switch {
		case b.Service == "" && b.Check == "":
			c.add(f, "needs one of service or check")
		case b.Service != "" && b.Check != "":
			c.add(f, "takes one of service or check, not both")
		case b.Tag != "" && b.Service == "":
			c.add(f+".tag", "needs service (a check has no tag)")
		}
		c.blockName(f+".service", b.Service)
		c.blockName(f+".tag", b.Tag)
		c.blockName(f+".check", b.Check)
	}
}

// blockName checks a name that is looked up in Consul's catalog: printable
// text of a bounded length, without surrounding space that no Consul
// name has.
func (c *checker) blockName(f, name string) {
	if name == "" {
		return
	}
	if msg := textProblem(name); msg != "" {
		c.add(f, "%s", msg)
		return
	}
	switch {
	case utf8.RuneCountInString(name) > MaxBlockNameLen:
		c.add(f, "must be at most %d characters, got %d", MaxBlockNameLen, utf8.RuneCountInString(name))
	case strings.TrimSpace(name) != name:
		c.add(f, "must not begin or end with space, got %q", name)
	case strings.IndexFunc(name, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0:
		c.add(f, "must be printable (no control characters), got %q", name)
	}
}
