package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestHandler(t *testing.T) {
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name     string
		cfg      config
		after    time.Duration // time since start when the request is made
		path     string
		wantCode int
		wantBody string
	}{
		{"index shows version and host", config{version: "v7", hostname: "h1"}, 0, "/", 200, "demoapp <b>v7</b> on <b>h1</b>"},
		{"index escapes", config{version: "<v>", hostname: "h"}, 0, "/", 200, "&lt;v&gt;"},
		{"healthy", config{version: "v1"}, 0, "/healthz", 200, "ok"},
		{"bad release", config{unhealthy: true}, time.Hour, "/healthz", 500, "DEMOAPP_UNHEALTHY=1"},
		{"slow start, still starting", config{unhealthyFor: 5 * time.Second}, 4 * time.Second, "/healthz", 500, "another 1s"},
		{"slow start, started", config{unhealthyFor: 5 * time.Second}, 5 * time.Second, "/healthz", 200, "ok"},
		{"unknown path", config{}, 0, "/nope", 404, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.start = start
			h := newHandler(tt.cfg, func() time.Time { return start.Add(tt.after) })
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tt.path, nil))
			if rec.Code != tt.wantCode {
				t.Errorf("status = %d, want %d (body %q)", rec.Code, tt.wantCode, rec.Body)
			}
			if !strings.Contains(rec.Body.String(), tt.wantBody) {
				t.Errorf("body = %q, want it to contain %q", rec.Body, tt.wantBody)
			}
		})
	}
}

func TestConfigFromEnv(t *testing.T) {
	tests := []struct {
		name, unhealthy, unhealthyFor string
		want                          config
		wantErr                       bool
	}{
		{name: "defaults", want: config{}},
		{name: "bad release", unhealthy: "1", want: config{unhealthy: true}},
		{name: "only 1 means unhealthy", unhealthy: "true", want: config{}},
		{name: "slow start", unhealthyFor: "1500ms", want: config{unhealthyFor: 1500 * time.Millisecond}},
		{name: "garbage duration", unhealthyFor: "soon", wantErr: true},
		{name: "negative duration", unhealthyFor: "-1s", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("DEMOAPP_VERSION", "v9")
			t.Setenv("DEMOAPP_UNHEALTHY", tt.unhealthy)
			t.Setenv("DEMOAPP_UNHEALTHY_FOR", tt.unhealthyFor)
			cfg, err := configFromEnv(time.Time{})
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if cfg.version != "v9" || cfg.unhealthy != tt.want.unhealthy || cfg.unhealthyFor != tt.want.unhealthyFor {
				t.Errorf("cfg = %+v, want version v9 and %+v", cfg, tt.want)
			}
		})
	}
}

// TestServeShutsDown checks the in-process half of the SIGTERM promise; the
// signal itself is covered by TestSIGTERM in main_test.go.
func TestServeShutsDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, ln, newHandler(config{version: "v1"}, time.Now)) }()

	resp, err := http.Get("http://" + ln.Addr().String() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || strings.TrimSpace(string(body)) != "ok" {
		t.Fatalf("GET /healthz = %d %q", resp.StatusCode, body)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
	case <-time.After(time.Second):
		t.Fatal("serve did not return within 1s of cancel")
	}
}
