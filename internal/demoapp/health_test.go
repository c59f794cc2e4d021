package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestHealthCmd(t *testing.T) {
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	}))
	defer ok.Close()
	bad := httptest.NewServer(newHandler(config{unhealthy: true}, time.Now))
	defer bad.Close()
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // answers only when the client gives up
	}))
	defer hang.Close()
	closed := httptest.NewServer(http.NotFoundHandler())
	closedURL := closed.URL
	closed.Close()

	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{"200 is healthy", []string{"--url", ok.URL}, 0, "healthy", ""},
		{"500 is unhealthy", []string{"--url", bad.URL + "/healthz"}, 1, "", "500 Internal Server Error: unhealthy: DEMOAPP_UNHEALTHY=1"},
		{"404 is unhealthy", []string{"--url", bad.URL + "/nope"}, 1, "", "404 Not Found"},
		{"connection refused", []string{"--url", closedURL}, 1, "", "refused"},
		{"timeout", []string{"--url", hang.URL, "--timeout", "100ms"}, 1, "", "Timeout"},
		{"bad flag is 1, not Docker's reserved 2", []string{"--nope"}, 1, "", "flag provided but not defined"},
		{"stray argument", []string{"extra"}, 1, "", "unexpected arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(append([]string{"health"}, tt.args...), &stdout, &stderr)
			if code != tt.wantCode {
				t.Errorf("exit = %d, want %d (stderr %q)", code, tt.wantCode, stderr.String())
			}
			if !strings.Contains(stdout.String(), tt.wantStdout) {
				t.Errorf("stdout = %q, want it to contain %q", stdout.String(), tt.wantStdout)
			}
			if !strings.Contains(stderr.String(), tt.wantStderr) {
				t.Errorf("stderr = %q, want it to contain %q", stderr.String(), tt.wantStderr)
			}
		})
	}
}

func TestDefaultHealthURLFollowsPORT(t *testing.T) {
	t.Setenv("PORT", "")
	if got, want := defaultHealthURL(), "http://127.0.0.1:8080/healthz"; got != want {
		t.Errorf("default = %q, want %q", got, want)
	}
	t.Setenv("PORT", "9000")
	if got, want := defaultHealthURL(), "http://127.0.0.1:9000/healthz"; got != want {
		t.Errorf("with PORT=9000 = %q, want %q", got, want)
	}
}
