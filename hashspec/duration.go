package hashspec

import (
	"encoding/json"
	"fmt"
	"time"
)

// Duration is a time.Duration that encodes as a Go duration string
// ("10s", "1m30s") in JSON and HCL, because nanosecond integers are
// unreadable in spec files.
type Duration time.Duration

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// String formats d like time.Duration does; the canonical encoding relies
// on this being exactly time.Duration.String.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON encodes d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(d.String())
}

// UnmarshalJSON accepts only a duration string: a bare number would be
// ambiguous (seconds? nanoseconds?) so it is rejected.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil // same as omitted, like every other field
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("must be a duration string such as \"10s\", got %s", b)
	}
	v, err := parseDuration(s)
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// parseDuration wraps time.ParseDuration with a message that suits a
// FieldError ("invalid duration "abc": ...").
func parseDuration(s string) (Duration, error) {
	v, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q (want e.g. \"10s\", \"1m30s\")", s)
	}
	return Duration(v), nil
}
