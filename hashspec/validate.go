package hashspec

import (
	"fmt"
	"net/netip"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/distribution/reference"
	"golang.org/x/text/unicode/norm"
)

var (
	envKeyRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	// Docker's own rule for volume names; checking it here fails the
	// spec at submit time instead of on every node at deploy time.
	volumeNameRe  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]+$`)
	networkNameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,254}$`)
)

const reservedLabelPrefix = "rollagent."

var (
	restartPolicies = []string{"no", "always", "unless-stopped", "on-failure"}
	failureActions  = []string{FailurePause, FailureRollback, FailureContinue}
	updateOrders    = []string{OrderStopFirst, OrderStartFirst}
)

// Docker rejects healthcheck durations below 1ms; catching that here
// fails the spec once instead of on every node.
const minHealthDuration = Duration(time.Millisecond)

// MaxDuration bounds every duration of a spec. A day is far beyond any
// real wait for health or probe interval, and it keeps what agents derive
// from them (a node's lease: twice healthy_deadline plus the agent's own
// bounds) far from overflowing, which would leave a grant with no claim.
const MaxDuration = Duration(24 * time.Hour)

// checker accumulates every problem so Validate can report them all.
type checker struct{ errs []*FieldError }

func (c *checker) add(field, format string, args ...any) {
	c.errs = append(c.errs, &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
}

// Validate checks a spec that already went through WithDefaults (zero
// values that WithDefaults would fill are errors here). It returns nil or
// a *ValidationError listing every problem.
func (s *Spec) Validate() error {
	c := &checker{}
	if s.Name != "" {
		if msg := nameProblem(s.Name); msg != "" {
			c.add("name", "%s", msg)
		}
	}
	c.container(&s.Container)
	c.update(&s.Update, &s.Container)
	c.order(s.Name, &s.Update)
	if len(c.errs) == 0 {
		return nil
	}
	return &ValidationError{Errors: c.errs}
}

func (c *checker) container(ct *Container) {
	c.image(ct.Image)
	c.args("container.cmd", ct.Cmd)
	c.args("container.entrypoint", ct.Entrypoint)
	c.env(ct.Env)
	c.labels(ct.Labels)
	c.ports(ct)
	c.volumes(ct.Volumes)
	c.oneOf("container.restart", ct.Restart, restartPolicies)
	if ct.Healthcheck != nil {
		c.healthcheck(ct.Healthcheck)
	}
	switch ct.NetworkMode {
	case "", "bridge", "host", "none":
	default:
		if !networkNameRe.MatchString(ct.NetworkMode) {
			c.add("container.network_mode", "must be bridge, host, none or a network name, got %q", ct.NetworkMode)
		}
	}
	if ct.PIDMode != "" && ct.PIDMode != "host" {
		c.add("container.pid_mode", `must be "" or "host", got %q`, ct.PIDMode)
	}
}

func (c *checker) image(img string) {
	if img == "" {
		c.add("container.image", "is required")
		return
	}
	named, err := reference.ParseNormalizedNamed(img)
	if err != nil {
		c.add("container.image", "invalid image reference %q: %v", img, err)
		return
	}
	// The reference library reads an uppercase first path element as a
	// registry host ("UPPER/case" pulls from host "UPPER"), which is
	// almost always a typo for a Docker Hub namespace. Host names are
	// case-insensitive anyway, so requiring lowercase loses nothing and
	// keeps one image from having two spellings (and two SHAs).
	if d := reference.Domain(named); d != strings.ToLower(d) {
		c.add("container.image", "invalid image reference %q: registry host %q must be lowercase", img, d)
	}
}

func (c *checker) args(field string, args []string) {
	for i, a := range args {
		if msg := textProblem(a); msg != "" {
			c.add(indexPath(field, i), "%s", msg)
		}
	}
}

func (c *checker) env(env map[string]string) {
	for _, k := range sortedKeys(env) {
		p := keyPath("container.env", k)
		if !envKeyRe.MatchString(k) {
			c.add(p, "invalid variable name %q (want [A-Za-z_][A-Za-z0-9_]*)", k)
			continue
		}
		v := env[k]
		if msg := textProblem(v); msg != "" {
			c.add(p, "%s", msg)
		} else if strings.ContainsAny(v, "\n\r") {
			c.add(p, "value must not contain newlines")
		}
	}
}

func (c *checker) labels(labels map[string]string) {
	for _, k := range sortedKeys(labels) {
		p := keyPath("container.labels", k)
		switch {
		case k == "":
			c.add(p, "label key must not be empty")
		case textProblem(k) != "":
			c.add(p, "label key %s", textProblem(k))
		case len(k) >= len(reservedLabelPrefix) && strings.EqualFold(k[:len(reservedLabelPrefix)], reservedLabelPrefix):
			// Case-insensitive so "Rollagent.sha" cannot pass for ours.
			c.add(p, "label keys starting with %q are reserved for the agent", reservedLabelPrefix)
		case textProblem(labels[k]) != "":
			c.add(p, "%s", textProblem(labels[k]))
		}
	}
}

func (c *checker) oneOf(field, v string, allowed []string) {
	if !slices.Contains(allowed, v) {
		c.add(field, "must be one of %s, got %q", strings.Join(allowed, ", "), v)
	}
}

// textProblem reports strings that cannot be passed to Docker or encoded
// unambiguously: invalid UTF-8 would be mangled to U+FFFD by JSON, so two
// different specs could share a SHA; text not in NFC would be composed by
// HCL and not by JSON (see decode_hcl_text.go).
func textProblem(s string) string {
	if !utf8.ValidString(s) {
		return "must be valid UTF-8"
	}
	if strings.IndexByte(s, 0) >= 0 {
		return "must not contain NUL bytes"
	}
	if !norm.NFC.IsNormalString(s) {
		return nfcMsg
	}
	return ""
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// checkPositive reports a duration that must be > 0 (and, for Docker
// healthchecks, at least min), and at most MaxDuration.
func (c *checker) checkPositive(field string, d, minimum Duration) {
	switch {
	case d <= 0:
		c.add(field, "must be greater than 0, got %s", d)
	case d < minimum:
		c.add(field, "must be at least %s, got %s", minimum, d)
	case d > MaxDuration:
		c.add(field, "must be at most %s, got %s", MaxDuration, d)
	}
}

// MaxCanary bounds update.canary: each agent's look reads every canary's
// record, so the count is what a look costs, not only a policy.
const MaxCanary = 100

// canary checks update.canary and what goes with it: a healthy time only
// where something reads it (auto_promote), and always there, so that no
// auto-promotion fires on a first sight of converged canaries.
func (c *checker) canary(u *Update) {
	switch {
	case u.Canary < 0:
		c.add(pathCanary, "must not be negative (0 or omitted means no canaries), got %d", u.Canary)
	case u.Canary > MaxCanary:
		c.add(pathCanary, "must be at most %d, got %d", MaxCanary, u.Canary)
	}
	switch {
	case u.AutoPromote && u.Canary == 0:
		c.add("update.auto_promote", "needs update.canary: with no canaries there is nothing to promote")
	case u.AutoPromote && u.CanaryHealthyTime <= 0:
		c.add(pathCanaryHealthyTime, "must be set, and positive, with update.auto_promote (how long the canaries stay healthy before promoting), got %s", u.CanaryHealthyTime)
	case !u.AutoPromote && u.CanaryHealthyTime != 0:
		c.add(pathCanaryHealthyTime, "is read only with update.auto_promote = true (`rollagent promote` promotes by hand), got %s", u.CanaryHealthyTime)
	case u.CanaryHealthyTime > MaxDuration:
		c.add(pathCanaryHealthyTime, "must be at most %s, got %s", MaxDuration, u.CanaryHealthyTime)
	}
}

// stagger checks update.stagger: 0 (or omitted) is no stagger.
func (c *checker) stagger(d Duration) {
	switch {
	case d < 0:
		c.add(pathStagger, "must not be negative (0 or omitted means no stagger), got %s", d)
	case d > MaxDuration:
		c.add(pathStagger, "must be at most %s, got %s", MaxDuration, d)
	}
}

func (c *checker) atLeast(field string, v, minimum int) {
	if v < minimum {
		c.add(field, "must be at least %d, got %d", minimum, v)
	}
}
func (c *checker) ports(ct *Container) {
	if len(ct.Ports) > 0 && (ct.NetworkMode == "host" || ct.NetworkMode == "none") {
		c.add("container.ports", "must be empty with network_mode %q (Docker ignores published ports there)", ct.NetworkMode)
	}
	for i, p := range ct.Ports {
		f := indexPath("container.ports", i)
		if p.Host < 0 || p.Host > 65535 {
			c.add(f+".host", "must be between 0 (not published) and 65535, got %d", p.Host)
		}
		if p.Container < 1 || p.Container > 65535 {
			c.add(f+".container", "must be between 1 and 65535, got %d", p.Container)
		}
		c.oneOf(f+".protocol", p.Protocol, []string{"tcp", "udp"})
		c.hostIP(f, p)
		for j := range i {
			if portsClash(ct.Ports[j], p) {
				c.add(f+".host", "host port %d/%s is already published by container.ports[%d]", p.Host, p.Protocol, j)
				break
			}
		}
	}
}

func (c *checker) hostIP(f string, p Port) {
	if p.HostIP == "" {
		return
	}
	addr, err := netip.ParseAddr(p.HostIP)
	switch {
	case err != nil:
		c.add(f+".host_ip", "invalid IP address %q", p.HostIP)
	case addr.Zone() != "":
		c.add(f+".host_ip", "must not have an IPv6 zone, got %q", p.HostIP)
	case p.Host == 0:
		c.add(f+".host_ip", "is set but host is 0 (port not published)")
	}
}

// portsClash reports two bindings Docker could not both publish: same
// host port and protocol on overlapping addresses ("" means all).
func portsClash(a, b Port) bool {
	if a.Host == 0 || a.Host != b.Host || a.Protocol != b.Protocol {
		return false
	}
	if a.HostIP == "" || b.HostIP == "" || a.HostIP == b.HostIP {
		return true
	}
	x, errX := netip.ParseAddr(a.HostIP)
	y, errY := netip.ParseAddr(b.HostIP)
	if errX != nil || errY != nil || x.Is4() != y.Is4() {
		return false
	}
	return x.IsUnspecified() || y.IsUnspecified()
}

func (c *checker) volumes(vols []Volume) {
	seen := map[string]int{}
	for i, v := range vols {
		f := indexPath("container.volumes", i)
		c.volumeSource(f+".source", v)
		c.oneOf(f+".type", v.Type, []string{"bind", "volume"})
		switch t := v.Target; {
		case t == "":
			c.add(f+".target", "is required")
		case textProblem(t) != "":
			c.add(f+".target", "%s", textProblem(t))
		case !path.IsAbs(t):
			c.add(f+".target", "must be an absolute path, got %q", t)
		case path.Clean(t) != t:
			c.add(f+".target", "must be a clean path (%q), got %q", path.Clean(t), t)
		case t == "/":
			c.add(f+".target", "must not be /")
		default:
			if j, dup := seen[t]; dup {
				c.add(f+".target", "%q is already mounted by container.volumes[%d]", t, j)
			}
			seen[t] = i
		}
	}
}

func (c *checker) volumeSource(f string, v Volume) {
	switch {
	case v.Source == "":
		c.add(f, "is required")
	case textProblem(v.Source) != "":
		c.add(f, "%s", textProblem(v.Source))
	case v.Type == "bind" && !path.IsAbs(v.Source):
		c.add(f, "bind source must be an absolute host path, got %q", v.Source)
	case v.Type == "volume" && !volumeNameRe.MatchString(v.Source):
		c.add(f, "volume source must be a Docker volume name ([A-Za-z0-9][A-Za-z0-9_.-]+), got %q; use type \"bind\" for host paths", v.Source)
	}
}

func (c *checker) healthcheck(h *Healthcheck) {
	const f = "container.healthcheck"
	c.healthTest(h.Test)
	c.checkPositive(f+".interval", h.Interval, minHealthDuration)
	c.checkPositive(f+".timeout", h.Timeout, minHealthDuration)
	c.atLeast(f+".retries", h.Retries, 1)
	switch sp := h.StartPeriod; {
	case sp < 0:
		c.add(f+".start_period", "must not be negative, got %s", sp)
	case sp > 0 && sp < minHealthDuration:
		c.add(f+".start_period", "must be 0 or at least %s, got %s", minHealthDuration, sp)
	case sp > MaxDuration:
		c.add(f+".start_period", "must be at most %s, got %s", MaxDuration, sp)
	}
}

func (c *checker) healthTest(test []string) {
	const f = "container.healthcheck.test"
	if len(test) == 0 {
		c.add(f, `is required, e.g. ["CMD", "/app", "health"]`)
		return
	}
	c.args(f, test)
	switch test[0] {
	case "NONE":
		if len(test) != 1 {
			c.add(f, `"NONE" takes no arguments, got %d`, len(test)-1)
		}
	case "CMD":
		if len(test) < 2 || test[1] == "" {
			c.add(f, `"CMD" needs a command, e.g. ["CMD", "/app", "health"]`)
		}
	case "CMD-SHELL":
		if len(test) != 2 || strings.TrimSpace(test[1]) == "" {
			c.add(f, `"CMD-SHELL" needs exactly one non-empty shell command`)
		}
	default:
		c.add(indexPath(f, 0), `must be "CMD", "CMD-SHELL" or "NONE", got %q`, test[0])
	}
}

func (c *checker) update(u *Update, ct *Container) {
	c.amount(pathMaxParallel, u.MaxParallel)
	c.checkPositive(pathMinHealthyTime, u.MinHealthyTime, 0)
	c.checkPositive(pathHealthyDeadline, u.HealthyDeadline, 0)
	// Only a min_healthy_time in range is compared: one over MaxDuration
	// has its own error, and no deadline could be after it.
	if u.MinHealthyTime > 0 && u.MinHealthyTime <= MaxDuration && u.HealthyDeadline > 0 && u.HealthyDeadline <= u.MinHealthyTime {
		c.add(pathHealthyDeadline, "must be greater than min_healthy_time (%s), got %s", u.MinHealthyTime, u.HealthyDeadline)
	}
	c.oneOf("update.failure_action", u.FailureAction, failureActions)
	c.amount(pathMaxFailures, u.MaxFailures)
	c.oneOf("update.order", u.Order, updateOrders)
	c.windows(u.Windows)
	c.blocks(pathBlockOn, u.BlockOn)
	c.blocks(pathBlockOnNode, u.BlockOnNode)
	c.stagger(u.Stagger)
	c.drain(u.Drain)
	c.progressDeadline(u)
	c.spread(u.MaxParallelPer)
	c.canary(u)
	if u.Order != OrderStartFirst {
		return
	}
	// start-first runs old and new side by side on one node, so a fixed
	// host port would be bound twice and the new container cannot start.
	for i, p := range ct.Ports {
		if p.Host != 0 {
			c.add("update.order", "%q cannot be used with published host ports (container.ports[%d] publishes %d)", OrderStartFirst, i, p.Host)
			return
		}
	}
}

// progressDeadline checks update.progress_deadline: none (0), or longer
// than one node's step may take to turn healthy (healthy_deadline), as
// Nomad asks of its own, or the deadline would pass in a step that is
// merely slow.
func (c *checker) progressDeadline(u *Update) {
	d := u.ProgressDeadline
	switch {
	case d == 0:
	case d < 0 || d > MaxDuration:
		c.checkPositive(pathProgress, d, 0)
	case u.HealthyDeadline > 0 && d <= u.HealthyDeadline:
		c.add(pathProgress, "must be greater than healthy_deadline (%s), got %s", u.HealthyDeadline, d)
	}
}
