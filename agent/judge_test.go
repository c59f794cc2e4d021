package agent

import (
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
)

// A run of failing readings is down only once its first and latest are
// DownAfter apart; a passing reading starts the count again.
func TestDownHistory(t *testing.T) {
	const after = 10 * time.Second
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	type reading struct {
		ok   bool
		at   time.Duration // after t0
		want Health
	}
	tests := []struct {
		name     string
		readings []reading
	}{
		{"passing", []reading{{true, 0, HealthUp}}},
		{"one failed probe is failing, not down", []reading{{false, 0, HealthFailing}}},
		{"failures in a row under DownAfter", []reading{{false, 0, HealthFailing}, {false, 9 * time.Second, HealthFailing}}},
		{"failures in a row spanning DownAfter", []reading{{false, 0, HealthFailing}, {false, after, HealthDown}}},
		{"a pass between starts again", []reading{{false, 0, HealthFailing}, {true, 5 * time.Second, HealthUp},
			{false, 6 * time.Second, HealthFailing}, {false, 12 * time.Second, HealthFailing}, {false, 16 * time.Second, HealthDown}}},
		{"down, then one pass is up", []reading{{false, 0, HealthFailing}, {false, 20 * time.Second, HealthDown}, {true, 21 * time.Second, HealthUp}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var h downHistory
			for i, r := range tc.readings {
				if got := h.judge(r.ok, t0.Add(r.at), after); got != r.want {
					t.Fatalf("reading %d (ok=%v at +%s) = %d, want %d", i, r.ok, r.at, got, r.want)
				}
			}
		})
	}
}

// Docker's own state says when a container is down: not running,
// restarting or paused, or unhealthy after its probe's retries. One that
// is starting is not down yet.
func TestJudgeContainer(t *testing.T) {
	state := func(st container.State) container.InspectResponse {
		return container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{State: &st}}
	}
	tests := []struct {
		name string
		insp container.InspectResponse
		want Health
	}{
		{"no state", container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{}}, HealthFailing},
		{"running without a healthcheck", running(nil), HealthUp},
		{"healthy", running(&container.Health{Status: container.Healthy}), HealthUp},
		{"starting right after a start", running(&container.Health{Status: container.Starting}), HealthFailing},
		{"unhealthy", running(&container.Health{Status: container.Unhealthy}), HealthDown},
		{"exited", state(container.State{Status: "exited", ExitCode: 1}), HealthDown},
		{"created, never started", state(container.State{Status: "created"}), HealthDown},
		{"restarting", state(container.State{Status: "restarting", Running: true, Restarting: true}), HealthDown},
		{"paused", state(container.State{Status: "paused", Running: true, Paused: true,
			Health: &container.Health{Status: container.Healthy}}), HealthDown},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got, why := judgeContainer(tc.insp); got != tc.want {
				t.Fatalf("judgeContainer = %d (%s), want %d", got, why, tc.want)
			}
		})
	}
}
