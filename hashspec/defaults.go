package hashspec

import (
	"maps"
	"net/netip"
	"path"
	"slices"
	"time"
)

// Defaults, applied by WithDefaults to fields left at their zero value.
const (
	DefaultRestart         = "unless-stopped"
	DefaultProtocol        = "tcp"
	DefaultInterval        = Duration(5 * time.Second)
	DefaultTimeout         = Duration(3 * time.Second)
	DefaultRetries         = 3
	DefaultMaxParallel     = 1 // a count (Amount.Count)
	DefaultMinHealthyTime  = Duration(10 * time.Second)
	DefaultHealthyDeadline = Duration(5 * time.Minute)
	DefaultMaxFailures     = 1 // a count (Amount.Count)
)

// Paths of the fields whose default is non-zero: an explicit zero there
// is a mistake the user must hear about, not something to paper over.
const (
	pathMaxParallel       = "update.max_parallel"
	pathMinHealthyTime    = "update.min_healthy_time"
	pathHealthyDeadline   = "update.healthy_deadline"
	pathMaxFailures       = "update.max_failures"
	pathInterval          = "container.healthcheck.interval"
	pathTimeout           = "container.healthcheck.timeout"
	pathRetries           = "container.healthcheck.retries"
	pathWindow            = "update.window"
	pathBlockOn           = "update.block_on"
	pathBlockOnNode       = "update.block_on_node"
	pathStagger           = "update.stagger"
	pathProgress          = "update.progress_deadline"
	pathCanary            = "update.canary"
	pathCanaryHealthyTime = "update.canary_healthy_time"
)

// WithDefaults returns a deep copy of s with every default filled in and
// empty maps/slices set to nil, so two specs that mean the same thing are
// reflect.DeepEqual and encode identically. It also normalises values
// with several spellings: volume targets and bind sources are
// path.Clean'ed and host IPs are written in netip's canonical form.
func (s *Spec) WithDefaults() Spec {
	out := Spec{Name: s.Name, Container: s.Container, Update: s.Update}
	if len(s.explicitZero) > 0 {
		out.explicitZero = slices.Clone(s.explicitZero)
	}
	out.Container = out.defaultContainer(s.Container)
	out.Update = out.defaultUpdate(s.Update)
	return out
}

func (s *Spec) setDefault(p string) bool {
	return !slices.Contains(s.explicitZero, p)
}

func (s *Spec) defaultContainer(c Container) Container {
	c.Cmd = cloneSlice(c.Cmd)
	c.Entrypoint = cloneSlice(c.Entrypoint)
	c.Env = cloneMap(c.Env)
	c.Labels = cloneMap(c.Labels)
	if c.Restart == "" {
		c.Restart = DefaultRestart
	}
	c.Ports = cloneSlice(c.Ports)
	for i := range c.Ports {
		c.Ports[i] = defaultPort(c.Ports[i])
	}
	c.Volumes = cloneSlice(c.Volumes)
	for i := range c.Volumes {
		c.Volumes[i] = defaultVolume(c.Volumes[i])
	}
	if c.Healthcheck != nil {
		hc := s.defaultHealthcheck(*c.Healthcheck)
		c.Healthcheck = &hc
	}
	return c
}

func defaultPort(p Port) Port {
	if p.Protocol == "" {
		p.Protocol = DefaultProtocol
	}
	if addr, err := netip.ParseAddr(p.HostIP); err == nil {
		p.HostIP = addr.String()
	}
	return p
}

func defaultVolume(v Volume) Volume {
	if v.Type == "" {
		v.Type = "volume"
		if path.IsAbs(v.Source) {
			v.Type = "bind"
		}
	}
	if v.Type == "bind" && path.IsAbs(v.Source) {
		v.Source = path.Clean(v.Source)
	}
	if v.Target != "" {
		v.Target = path.Clean(v.Target)
	}
	return v
}

func (s *Spec) defaultHealthcheck(h Healthcheck) Healthcheck {
	h.Test = cloneSlice(h.Test)
	if h.Interval == 0 && s.setDefault(pathInterval) {
		h.Interval = DefaultInterval
	}
	if h.Timeout == 0 && s.setDefault(pathTimeout) {
		h.Timeout = DefaultTimeout
	}
	if h.Retries == 0 && s.setDefault(pathRetries) {
		h.Retries = DefaultRetries
	}
	return h
}

func (s *Spec) defaultUpdate(u Update) Update {
	if u.MaxParallel.IsZero() && s.setDefault(pathMaxParallel) {
		u.MaxParallel = Count(DefaultMaxParallel)
	}
	if u.MinHealthyTime == 0 && s.setDefault(pathMinHealthyTime) {
		u.MinHealthyTime = DefaultMinHealthyTime
	}
	if u.HealthyDeadline == 0 && s.setDefault(pathHealthyDeadline) {
		u.HealthyDeadline = DefaultHealthyDeadline
	}
	if u.FailureAction == "" {
		u.FailureAction = FailurePause
	}
	if u.MaxFailures.IsZero() && s.setDefault(pathMaxFailures) {
		u.MaxFailures = Count(DefaultMaxFailures)
	}
	if u.Order == "" {
		u.Order = OrderStopFirst
	}
	u.Windows = normalWindows(u.Windows)
	u.BlockOn = normalBlocks(u.BlockOn)
	u.BlockOnNode = normalBlocks(u.BlockOnNode)
	u.Drain = normalDrain(u.Drain)
	u.After = normalAfter(u.After)
	return u
}

// markExplicitZeros records which non-zero-default fields the input set
// to zero. present holds the paths the decoder saw with a non-null value.
func (s *Spec) markExplicitZeros(present map[string]bool) {
	u, hc := s.Update, s.Container.Healthcheck
	zero := map[string]bool{
		pathMaxParallel:     u.MaxParallel.IsZero(),
		pathMinHealthyTime:  u.MinHealthyTime == 0,
		pathHealthyDeadline: u.HealthyDeadline == 0,
		pathMaxFailures:     u.MaxFailures.IsZero(),
	}
	if hc != nil {
		zero[pathInterval] = hc.Interval == 0
		zero[pathTimeout] = hc.Timeout == 0
		zero[pathRetries] = hc.Retries == 0
	}
	s.explicitZero = nil
	for p, isZero := range zero {
		if isZero && present[p] {
			s.explicitZero = append(s.explicitZero, p)
		}
	}
	slices.Sort(s.explicitZero)
}

// cloneSlice copies s, mapping empty to nil so "[]" and omitted agree.
func cloneSlice[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return slices.Clone(s)
}

// cloneMap copies m, mapping empty to nil so "{}" and omitted agree.
func cloneMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return maps.Clone(m)
}
