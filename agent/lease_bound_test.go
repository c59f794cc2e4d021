package agent

import (
	"cmp"
	"math"
	"testing"
	"time"

	"github.com/rollagent/rollagent/hashspec"
)

// A node's lease is positive whatever it is computed from: one that
// wrapped negative would make a grant write no claim, and the node's slot
// would pass to the next in line while it still works.
func TestLeaseNeverWraps(t *testing.T) {
	spec := func(hd string) *hashspec.Spec {
		d, err := time.ParseDuration(hd)
		if err != nil {
			t.Fatal(err)
		}
		return &hashspec.Spec{Update: hashspec.Update{HealthyDeadline: hashspec.Duration(d)}}
	}
	tests := []struct {
		name string
		hook time.Duration
		spec *hashspec.Spec
		want time.Duration // 0: only positive, and at least twice healthy_deadline
	}{
		{"defaults", 0, nil, 0},
		{"the largest valid deadline", time.Hour, spec("24h"), 0},
		{"an absurd deadline (never valid)", time.Hour, spec("2562047h47m"), math.MaxInt64},
		{"an absurd hook timeout", math.MaxInt64 - 1, spec("5m"), math.MaxInt64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := &Agent{cfg: Config{Runtime: &Exec{HookTimeout: tt.hook}, leaseGrace: leaseGrace}}
			got := a.lease(tt.spec)
			hd := hashspec.DefaultHealthyDeadline.Std()
			if tt.spec != nil {
				hd = tt.spec.Update.HealthyDeadline.Std()
			}
			switch {
			case got <= 0:
				t.Fatalf("lease = %s, want it positive", got)
			case tt.want != 0 && got != tt.want:
				t.Fatalf("lease = %s, want %s", got, tt.want)
			case tt.want == 0 && got < 2*hd:
				t.Fatalf("lease = %s, want at least twice healthy_deadline %s", got, hd)
			}
		})
	}
}

// An exec node's lease, with no drain, is what the run command's help says:
// its hook timeout + twice healthy_deadline + ExecLeaseSlack.
func TestExecLeaseIsWhatTheHelpSays(t *testing.T) {
	for _, tt := range []struct {
		name string
		hook time.Duration
		spec *hashspec.Spec
	}{
		{"defaults", 0, nil},
		{"a hook timeout and a deadline", time.Minute, &hashspec.Spec{Update: hashspec.Update{HealthyDeadline: hashspec.Duration(3 * time.Minute)}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := &Agent{cfg: Config{Runtime: &Exec{HookTimeout: tt.hook}, leaseGrace: leaseGrace}}
			hook, hd := cmp.Or(tt.hook, DefaultHookTimeout), hashspec.DefaultHealthyDeadline.Std()
			if tt.spec != nil {
				hd = tt.spec.Update.HealthyDeadline.Std()
			}
			if got, want := a.lease(tt.spec), hook+2*hd+ExecLeaseSlack; got != want {
				t.Fatalf("lease = %s, want %s", got, want)
			}
		})
	}
}
