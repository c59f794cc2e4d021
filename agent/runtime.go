package agent

import (
	"context"

	"github.com/rollagent/rollagent/hashspec"
)

// Observed is what a runtime finds on its node.
type Observed struct {
	// SHA of the workload that runs now, or that an interrupted step
	// started; "" when none is managed or only a set-aside one is left.
	SHA string
	// Leftover says a replacement was interrupted (the agent died mid-step)
	// with the old workload set aside: it is verified, finished or undone
	// under the node's slot before anything else.
	Leftover bool
	// ImageID is the ID of the image the workload runs, "" when the
	// runtime has none (exec) or nothing runs.
	ImageID string
}

// StepFunc is called right before every destructive step with the step's
// name. It fences the step; a non-nil error means the step must not run.
type StepFunc func(ctx context.Context, step string) error

// Runtime replaces one node's workload. It is declared here, by its
// consumer, and kept to what the agent's loop needs.
type Runtime interface {
	// Inspect reports the workload without changing anything.
	Inspect(ctx context.Context) (Observed, error)
	// Prepare does the non-destructive work before a slot is needed, such
	// as pulling the image.
	Prepare(ctx context.Context, spec *hashspec.Spec, sha string) error
	// Replace swaps the workload for spec, calling step before each
	// destructive step. On error the old workload may still be set aside:
	// call Restore.
	Replace(ctx context.Context, spec *hashspec.Spec, sha string, step StepFunc) error
	// WaitHealthy returns once the new workload has been healthy for
	// min_healthy_time, or fails at healthy_deadline.
	WaitHealthy(ctx context.Context, spec *hashspec.Spec) error
	// Finish drops the old workload after a healthy replacement.
	Finish(ctx context.Context) error
	// Restore undoes a replacement to sha: it removes a workload that runs
	// sha and brings the old one back, if one was set aside.
	Restore(ctx context.Context, sha string) error
	// Healthy reports whether the current workload is healthy now, for the
	// Consul service check.
	Healthy(ctx context.Context) (bool, string)
}
