package hashspec

import (
	"regexp"
	"unicode/utf8"
)

// Spread bounds how many nodes of one topology domain (a rack, a zone:
// the nodes whose Consul node meta has the same value for Key) are
// unavailable at once, besides max_parallel: at most Max. A node whose
// Consul node has no such meta is a domain of its own.
type Spread struct {
	// Key is a Consul node-meta key, such as "zone". Required.
	Key string `json:"key"`
	// Max is how many nodes of one domain may be unavailable at once; at
	// least 1.
	Max int `json:"max"`
}

// MaxSpreadKeyLen is Consul's own bound on a node-meta key.
const MaxSpreadKeyLen = 128

const pathSpread = "update.max_parallel_per"

// spreadKey is what Consul accepts as a node-meta key: a key it would
// refuse could never match a node.
var spreadKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

func (c *checker) spread(s *Spread) {
	if s == nil {
		return
	}
	switch {
	case s.Key == "":
		c.add(pathSpread+".key", "needs a Consul node-meta key, such as \"zone\"")
	case utf8.RuneCountInString(s.Key) > MaxSpreadKeyLen:
		c.add(pathSpread+".key", "must be at most %d characters, got %d", MaxSpreadKeyLen, utf8.RuneCountInString(s.Key))
	case !spreadKey.MatchString(s.Key):
		c.add(pathSpread+".key", "must be a Consul node-meta key (letters, digits, \"_\" and \"-\"), got %q", s.Key)
	}
	c.atLeast(pathSpread+".max", s.Max, 1)
}
