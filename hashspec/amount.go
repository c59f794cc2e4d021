package hashspec

import (
	"encoding/json"
	"fmt"
	"math/big"
	"reflect"
	"regexp"
	"strconv"

	"github.com/zclconf/go-cty/cty"
)

// Amount is update.max_parallel or update.max_failures: a count of nodes
// (a JSON or HCL number, as before percentages), or a percentage of the
// group's nodes that count ("25%", a string), resolved by Of against the
// group as it is when it is used. The zero Amount is unset.
//
// A count encodes canonically as the number it always did, so no SHA of a
// spec written before percentages changes; a percentage as the string
// "N%".
type Amount struct {
	// Count is the number of nodes, when Percent is 0.
	Count int
	// Percent is the percentage, 1 to 100; 0 means the Amount is Count.
	Percent int
}

// Count is an Amount of n nodes.
func Count(n int) Amount { return Amount{Count: n} }

// Percent is an Amount of p percent of the group's nodes that count.
func Percent(p int) Amount { return Amount{Percent: p} }

// IsPercent says a is a percentage.
func (a Amount) IsPercent() bool { return a.Percent != 0 }

// IsZero says a is unset (a count of 0 with no percentage).
func (a Amount) IsZero() bool { return a == Amount{} }

// String is a as a spec writes it: "2" or "25%".
func (a Amount) String() string {
	if a.IsPercent() {
		return strconv.Itoa(a.Percent) + "%"
	}
	return strconv.Itoa(a.Count)
}

// Of is the number a means for a group of nodes nodes: a count as it is;
// a percentage rounded DOWN (as Kubernetes rounds a Deployment's
// maxUnavailable, kubernetes#37083), and never below 1, so that a small
// group still moves and a failure budget is never 0. 25% of 7 nodes is 1,
// of 8 is 2; 50% of 1 node is 1.
func (a Amount) Of(nodes int) int {
	if !a.IsPercent() {
		return a.Count
	}
	return max(1, max(nodes, 0)*a.Percent/100)
}

// MarshalJSON writes a count as a number and a percentage as "N%".
func (a Amount) MarshalJSON() ([]byte, error) {
	if a.IsPercent() {
		return json.Marshal(a.String())
	}
	return json.Marshal(a.Count)
}

// UnmarshalJSON reads a number as a count and "N%" as a percentage. The
// decoder's walk has already refused anything else with its line.
func (a *Amount) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil // as encoding/json leaves any field at null
	}
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		p, err := parsePercent(s)
		if err != nil {
			return err
		}
		*a = Percent(p)
		return nil
	}
	var n int
	if err := json.Unmarshal(b, &n); err != nil {
		return err
	}
	*a = Count(n)
	return nil
}

var amountType = reflect.TypeFor[Amount]()

// percentRe is the only spelling of a percentage: a whole number from 1
// to 100, no sign, no leading zero, no space, no fraction ("25.5%" is
// refused rather than rounded, as the rounding of a count is ours to
// state once, in Of).
var (
	percentRe = regexp.MustCompile(`^(100|[1-9][0-9]?)%$`)
	digitsRe  = regexp.MustCompile(`^-?[0-9]+$`)
)

// errPercent is the message for a string that is no percentage.
const errPercent = `must be a number, or a whole percentage from "1%%" to "100%%" such as "25%%", got %q`

func parsePercent(s string) (int, error) {
	if !percentRe.MatchString(s) {
		return 0, fmt.Errorf(errPercent, s)
	}
	return strconv.Atoi(s[:len(s)-1])
}

// amount is Validate's check of an Amount that WithDefaults has seen.
func (c *checker) amount(field string, a Amount) {
	if a.IsPercent() {
		if a.Percent < 1 || a.Percent > 100 || a.Count != 0 {
			c.add(field, "must be a percentage from 1%% to 100%%, got %d%%", a.Percent)
		}
		return
	}
	c.atLeast(field, a.Count, 1)
}

// amountFromCty converts HCL's value of an Amount: a whole number is a
// count, as is a string of digits (HCL's own conversion, which a count
// always had), and "N%" a percentage.
func amountFromCty(v cty.Value) (Amount, error) {
	if !v.IsKnown() || v.IsNull() {
		return Amount{}, nil
	}
	switch v.Type() {
	case cty.Number:
		return countFromBig(v.AsBigFloat())
	case cty.String:
		s := v.AsString()
		if f, ok := new(big.Float).SetString(s); ok && digitsRe.MatchString(s) {
			return countFromBig(f)
		}
		p, err := parsePercent(s)
		return Percent(p), err
	}
	return Amount{}, fmt.Errorf(`must be a number or a percentage such as "25%%", got %s`, v.Type().FriendlyName())
}

func countFromBig(f *big.Float) (Amount, error) {
	n, acc := f.Int64()
	if !f.IsInt() || acc != big.Exact || int64(int(n)) != n {
		return Amount{}, fmt.Errorf("must be an integer, got %s", f.Text('g', -1))
	}
	return Count(int(n)), nil
}
