package hashspec

import "github.com/zclconf/go-cty/cty"

// hclConv turns the decoded hcl* structs into a Spec, parsing durations
// and recording which defaulted fields were written.
type hclConv struct {
	filename string
	idx      *hclIndex
	present  map[string]bool
	errs     []error
}

func (c *hclConv) spec(hf *hclFile) *Spec {
	s := &Spec{Name: hf.Name}
	if hc := hf.Container; hc != nil {
		s.Container = c.container(hc)
	}
	if u := hf.Update; u != nil {
		s.Update = c.update(u)
	}
	return s
}

func (c *hclConv) container(hc *hclContainer) Container {
	ct := Container{
		Image:       hc.Image,
		Cmd:         hc.Cmd,
		Entrypoint:  hc.Entrypoint,
		Env:         hc.Env,
		Labels:      hc.Labels,
		Restart:     hc.Restart,
		Privileged:  hc.Privileged,
		NetworkMode: hc.NetworkMode,
		PIDMode:     hc.PIDMode,
	}
	for _, p := range hc.Ports {
		ct.Ports = append(ct.Ports, Port(p))
	}
	for _, v := range hc.Volumes {
		ct.Volumes = append(ct.Volumes, Volume(v))
	}
	if h := hc.Healthcheck; h != nil {
		ct.Healthcheck = c.healthcheck(h)
	}
	return ct
}

func (c *hclConv) update(u *hclUpdate) Update {
	up := Update{
		MaxParallel:       c.amount(pathMaxParallel, u.MaxParallel),
		MinHealthyTime:    c.duration(pathMinHealthyTime, u.MinHealthyTime),
		HealthyDeadline:   c.duration(pathHealthyDeadline, u.HealthyDeadline),
		FailureAction:     u.FailureAction,
		MaxFailures:       c.amount(pathMaxFailures, u.MaxFailures),
		Order:             u.Order,
		Stagger:           c.duration(pathStagger, u.Stagger),
		ProgressDeadline:  c.duration(pathProgress, u.ProgressDeadline),
		After:             u.After,
		Canary:            c.int(pathCanary, u.Canary),
		CanaryHealthyTime: c.duration(pathCanaryHealthyTime, u.CanaryHealthy),
		AutoPromote:       u.AutoPromote,
	}
	if l := u.Last; l != nil {
		up.Last = &Last{Check: l.Check}
	}
	for i, w := range u.Windows {
		up.Windows = append(up.Windows, Window{Days: w.Days, Start: w.Start, TimeZone: w.TimeZone,
			Length: c.duration(indexPath(pathWindow, i)+".length", w.Length)})
	}
	for _, b := range u.BlockOn {
		up.BlockOn = append(up.BlockOn, Block(b))
	}
	for _, b := range u.BlockOnNode {
		up.BlockOnNode = append(up.BlockOnNode, Block(b))
	}
	if d := u.Drain; d != nil {
		up.Drain = &Drain{Services: d.Services, Delay: c.duration(pathDrain+".delay", d.Delay)}
	}
	if p := u.MaxParallelPer; p != nil {
		up.MaxParallelPer = &Spread{Key: p.Key, Max: c.int(pathSpread+".max", p.Max)}
	}
	return up
}

func (c *hclConv) healthcheck(h *hclHealthcheck) *Healthcheck {
	const f = "container.healthcheck"
	return &Healthcheck{
		Test:        h.Test,
		Interval:    c.duration(pathInterval, h.Interval),
		Timeout:     c.duration(pathTimeout, h.Timeout),
		Retries:     c.int(pathRetries, h.Retries),
		StartPeriod: c.duration(f+".start_period", h.StartPeriod),
	}
}

func (c *hclConv) int(p string, v *int) int {
	if v == nil {
		return 0
	}
	c.present[p] = true
	return *v
}

// amount converts a count or a percentage; a value that is neither is an
// error on its line.
func (c *hclConv) amount(p string, v cty.Value) Amount {
	if v.IsNull() {
		return Amount{}
	}
	c.present[p] = true
	a, err := amountFromCty(v)
	if err != nil {
		c.errs = append(c.errs, &ParseError{Filename: c.filename, Line: c.idx.line(p), Field: p, Msg: err.Error()})
	}
	return a
}

func (c *hclConv) duration(p string, v *string) Duration {
	if v == nil {
		return 0
	}
	c.present[p] = true
	d, err := parseDuration(*v)
	if err != nil {
		c.errs = append(c.errs, &ParseError{Filename: c.filename, Line: c.idx.line(p), Field: p, Msg: err.Error()})
	}
	return d
}
