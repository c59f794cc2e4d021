package dockertest_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/client"

	"github.com/rollagent/rollagent/internal/dockertest"
)

type waitCase struct {
	name    string
	image   func() dockertest.GoImage
	cmd     []string      // replaces the image's CMD when set
	wait    time.Duration // WaitHealthy's deadline; 30s when zero
	wantErr []string      // all must appear; none means healthy
}

var waitCases = []waitCase{
	{name: "healthy release", image: func() dockertest.GoImage { return demoappImage("good", nil) }},
	{
		name:    "bad release is unhealthy",
		image:   func() dockertest.GoImage { return demoappImage("bad", map[string]string{"DEMOAPP_UNHEALTHY": "1"}) },
		wantErr: []string{"is unhealthy after 2 failed checks", "500 Internal Server Error: unhealthy: DEMOAPP_UNHEALTHY=1"},
	},
	{
		name: "slow start inside the start period",
		image: func() dockertest.GoImage {
			o := demoappImage("slow", map[string]string{"DEMOAPP_UNHEALTHY_FOR": "2s"})
			o.HealthStartPeriod = 20 * time.Second
			return o
		},
	},
	{
		name: "never healthy times out with what it saw",
		image: func() dockertest.GoImage {
			o := demoappImage("stuck", map[string]string{"DEMOAPP_UNHEALTHY_FOR": "1h"})
			o.HealthStartPeriod = time.Hour
			return o
		},
		wait:    4 * time.Second,
		wantErr: []string{"not healthy: context deadline exceeded", "status starting", "starting: unhealthy for another"},
	},
	{
		name:    "crash before healthy",
		image:   func() dockertest.GoImage { return demoappImage("crash", nil) },
		cmd:     []string{"no-such-command"},
		wantErr: []string{"is exited (exit code 2) before becoming healthy"},
	},
	{
		name: "no healthcheck: running for a second is enough",
		image: func() dockertest.GoImage {
			o := demoappImage("plain", nil)
			o.Healthcheck = nil
			return o
		},
	},
}

func TestWaitHealthy(t *testing.T) {
	cli := dockertest.Client(t)
	// Registered on the parent, so it runs after all the parallel subtests.
	dockertest.Cleanup(t, cli)
	for _, tt := range waitCases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			checkWaitHealthy(t, cli, tt)
		})
	}
}

func checkWaitHealthy(t *testing.T, cli *client.Client, tt waitCase) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tag := dockertest.BuildGoImage(t, cli, tt.image())
	id := startContainer(t, ctx, cli, tag, "", tt.cmd...)
	wait := tt.wait
	if wait == 0 {
		wait = 30 * time.Second
	}
	wctx, wcancel := context.WithTimeout(ctx, wait)
	defer wcancel()
	start := time.Now()
	err := dockertest.WaitHealthy(wctx, cli, id)
	t.Logf("WaitHealthy returned after %s: %v", time.Since(start).Round(time.Millisecond), err)
	if len(tt.wantErr) == 0 {
		if err != nil {
			t.Fatal(err)
		}
		return
	}
	if err == nil {
		t.Fatalf("WaitHealthy = nil, want an error with %q", tt.wantErr)
	}
	for _, want := range tt.wantErr {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if tt.wait != 0 && !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %v does not wrap the context's", err)
	}
}
