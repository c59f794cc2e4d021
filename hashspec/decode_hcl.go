package hashspec

import (
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// The hcl* types mirror Spec in HCL's shape (repeated "port"/"volume"
// blocks, durations as strings). Fields with a non-zero default are
// pointers so an explicit zero can be told apart from an omitted field.
type hclFile struct {
	Name      string        `hcl:"name,optional"`
	Container *hclContainer `hcl:"container,block"`
	Update    *hclUpdate    `hcl:"update,block"`
}

type hclContainer struct {
	Image       string            `hcl:"image,optional"`
	Cmd         []string          `hcl:"cmd,optional"`
	Entrypoint  []string          `hcl:"entrypoint,optional"`
	Env         map[string]string `hcl:"env,optional"`
	Labels      map[string]string `hcl:"labels,optional"`
	Restart     string            `hcl:"restart,optional"`
	Privileged  bool              `hcl:"privileged,optional"`
	NetworkMode string            `hcl:"network_mode,optional"`
	PIDMode     string            `hcl:"pid_mode,optional"`
	Ports       []hclPort         `hcl:"port,block"`
	Volumes     []hclVolume       `hcl:"volume,block"`
	Healthcheck *hclHealthcheck   `hcl:"healthcheck,block"`
}

type hclPort struct {
	Host      int    `hcl:"host,optional"`
	Container int    `hcl:"container,optional"`
	Protocol  string `hcl:"protocol,optional"`
	HostIP    string `hcl:"host_ip,optional"`
}

type hclVolume struct {
	Type     string `hcl:"type,optional"`
	Source   string `hcl:"source,optional"`
	Target   string `hcl:"target,optional"`
	ReadOnly bool   `hcl:"read_only,optional"`
}

type hclHealthcheck struct {
	Test        []string `hcl:"test,optional"`
	Interval    *string  `hcl:"interval,optional"`
	Timeout     *string  `hcl:"timeout,optional"`
	Retries     *int     `hcl:"retries,optional"`
	StartPeriod *string  `hcl:"start_period,optional"`
}

type hclUpdate struct {
	MaxParallel      cty.Value   `hcl:"max_parallel,optional"`
	MinHealthyTime   *string     `hcl:"min_healthy_time,optional"`
	HealthyDeadline  *string     `hcl:"healthy_deadline,optional"`
	FailureAction    string      `hcl:"failure_action,optional"`
	MaxFailures      cty.Value   `hcl:"max_failures,optional"`
	Order            string      `hcl:"order,optional"`
	Windows          []hclWindow `hcl:"window,block"`
	BlockOn          []hclBlock  `hcl:"block_on,block"`
	BlockOnNode      []hclBlock  `hcl:"block_on_node,block"`
	Stagger          *string     `hcl:"stagger,optional"`
	Drain            *hclDrain   `hcl:"drain,block"`
	ProgressDeadline *string     `hcl:"progress_deadline,optional"`
	After            []string    `hcl:"after,optional"`
	Last             *hclLast    `hcl:"last,block"`
	MaxParallelPer   *hclSpread  `hcl:"max_parallel_per,block"`
	Canary           *int        `hcl:"canary,optional"`
	CanaryHealthy    *string     `hcl:"canary_healthy_time,optional"`
	AutoPromote      bool        `hcl:"auto_promote,optional"`
}

type hclSpread struct {
	Key string `hcl:"key,optional"`
	Max *int   `hcl:"max,optional"`
}

type hclLast struct {
	Check string `hcl:"check,optional"`
}

type hclDrain struct {
	Services []string `hcl:"services,optional"`
	Delay    *string  `hcl:"delay,optional"`
}

type hclBlock struct {
	Service string `hcl:"service,optional"`
	Tag     string `hcl:"tag,optional"`
	Check   string `hcl:"check,optional"`
}

type hclWindow struct {
	Days     []string `hcl:"days,optional"`
	Start    string   `hcl:"start,optional"`
	Length   *string  `hcl:"length,optional"`
	TimeZone string   `hcl:"time_zone,optional"`
}

func decodeHCL(data []byte, filename string) (*Spec, error) {
	if err := guardHCL(data, filename); err != nil {
		return nil, err
	}
	file, diags := hclsyntax.ParseConfig(data, filename, hcl.InitialPos)
	idx := &hclIndex{}
	if file != nil {
		if body, ok := file.Body.(*hclsyntax.Body); ok {
			idx.addBody(body, "")
		}
	}
	if diags.HasErrors() {
		return nil, idx.diagErrors(filename, data, diags)
	}
	if body, ok := file.Body.(*hclsyntax.Body); ok {
		if err := checkHCLText(body, data, filename, idx); err != nil {
			return nil, err
		}
	}
	var hf hclFile
	// A nil EvalContext: spec files are data, so variables and functions
	// are rejected rather than resolved against anything.
	if diags := gohcl.DecodeBody(file.Body, nil, &hf); diags.HasErrors() {
		return nil, idx.diagErrors(filename, data, diags)
	}
	conv := &hclConv{filename: filename, idx: idx, present: map[string]bool{}}
	s := conv.spec(&hf)
	if err := selfAfterError(s, filename, idx.line(pathAfter)); err != nil {
		conv.errs = append(conv.errs, err)
	}
	if len(conv.errs) > 0 {
		return nil, errors.Join(conv.errs...)
	}
	s.markExplicitZeros(conv.present)
	return s, nil
}

// repeatedBlocks are the blocks that stand for a list, by their parent:
// in a field path they are named as the list, with an index.
var repeatedBlocks = map[string]map[string]string{
	"container": {"port": "ports", "volume": "volumes"},
	"update":    {"window": "window", "block_on": "block_on", "block_on_node": "block_on_node"},
}

// hclIndex maps source ranges to field paths so HCL diagnostics can name
// the field the same way validation errors do.
type hclIndex struct{ entries []hclEntry }

type hclEntry struct {
	path string
	rng  hcl.Range
}

func (x *hclIndex) addBody(body *hclsyntax.Body, prefix string) {
	for name, attr := range body.Attributes {
		x.entries = append(x.entries, hclEntry{fieldPath(prefix, name), attr.SrcRange})
	}
	counts := map[string]int{}
	for _, b := range body.Blocks {
		p := fieldPath(prefix, b.Type)
		if list, ok := repeatedBlocks[prefix][b.Type]; ok {
			p = indexPath(fieldPath(prefix, list), counts[b.Type])
			counts[b.Type]++
		}
		x.entries = append(x.entries, hclEntry{p, b.Range()})
		if b.Body != nil {
			x.addBody(b.Body, p)
		}
	}
}

// at returns the path of the innermost entry containing pos.
func (x *hclIndex) at(pos hcl.Pos) string {
	best, bestLen := "", -1
	for _, e := range x.entries {
		if !e.rng.ContainsOffset(pos.Byte) && e.rng.Start.Byte != pos.Byte {
			continue
		}
		if l := e.rng.End.Byte - e.rng.Start.Byte; bestLen < 0 || l < bestLen {
			best, bestLen = e.path, l
		}
	}
	return best
}

func (x *hclIndex) line(path string) int {
	for _, e := range x.entries {
		if e.path == path {
			return e.rng.Start.Line
		}
	}
	return 0
}

func (x *hclIndex) diagErrors(filename string, src []byte, diags hcl.Diagnostics) error {
	var errs []error
	for _, d := range diags {
		if d.Severity != hcl.DiagError {
			continue
		}
		if len(errs) == maxDecodeErrors {
			errs = append(errs, &ParseError{Filename: filename, Msg: "too many errors; the rest are not shown"})
			break
		}
		pe := &ParseError{Filename: filename, Msg: diagMsg(d)}
		if r := d.Subject; r != nil {
			pe.Line = r.Start.Line
			pe.Field = x.at(r.Start)
			// A redefined attribute is not in the parsed body (it is a
			// map), so the index finds only the enclosing block; the
			// diagnostic's subject is the attribute's name.
			if d.Summary == "Attribute redefined" && r.End.Byte <= len(src) && r.Start.Byte <= r.End.Byte {
				pe.Field = fieldPath(pe.Field, string(src[r.Start.Byte:r.End.Byte]))
			}
		}
		errs = append(errs, pe)
	}
	return errors.Join(errs...)
}

// diagMsg words "unsupported" diagnostics like the JSON decoder does,
// keeping HCL's spelling suggestion when it has one.
func diagMsg(d *hcl.Diagnostic) string {
	switch d.Summary {
	case "Unsupported argument", "Unsupported block type":
		if i := strings.Index(d.Detail, "Did you mean"); i >= 0 {
			return "unknown field; " + d.Detail[i:]
		}
		return "unknown field"
	}
	if d.Detail == "" {
		return d.Summary
	}
	return fmt.Sprintf("%s: %s", d.Summary, d.Detail)
}
