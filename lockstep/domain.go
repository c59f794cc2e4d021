package lockstep

import (
	"context"
	"slices"
)

// domainOf is the domain the holders record gives name: its claim's, or,
// for a holder without one (a gate without a lease), its entry's.
func (s *snapshot) domainOf(name string) string {
	if c, ok := s.holders.Claims[name]; ok && c.counts() {
		return c.Domain
	}
	for _, e := range s.live {
		if e.Name == name {
			return e.Domain
		}
	}
	return ""
}

// sameDomain lists the names of busy, other than this contender, that the
// holders record puts in domain. A domain of "" is shared with no one.
func (s *snapshot) sameDomain(domain, self string, busy []string) []string {
	if domain == "" {
		return nil
	}
	var out []string
	for _, n := range busy {
		if n != self && s.domainOf(n) == domain {
			out = append(out, n)
		}
	}
	return out
}

// domainFull says n names of our domain, besides us, fill it.
func (m *Semaphore) domainFull(g Gate, n int) bool {
	return g.PerDomain > 0 && m.opts.Domain != "" && n >= g.PerDomain
}

// downInDomain lists the names of down, down outside the line, that
// Options.Domains puts in this contender's domain.
func (m *Semaphore) downInDomain(ctx context.Context, g Gate, down []string) ([]string, error) {
	if g.PerDomain <= 0 || m.opts.Domain == "" || m.opts.Domains == nil || len(down) == 0 {
		return nil, nil
	}
	domains, err := m.opts.Domains(ctx)
	if err != nil {
		return nil, consulErr{err}
	}
	var out []string
	for _, n := range down {
		if d, ok := domains[n]; ok && d == m.opts.Domain && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out, nil
}
