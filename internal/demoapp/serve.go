package main

import (
	"context"
	"errors"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// shutdownGrace keeps the whole SIGTERM-to-exit path well under the 1s that
// rollouts budget for a stop, even with a slow client holding a connection.
const shutdownGrace = 500 * time.Millisecond

type config struct {
	version      string
	hostname     string
	unhealthy    bool          // DEMOAPP_UNHEALTHY=1: a release that never becomes healthy
	unhealthyFor time.Duration // DEMOAPP_UNHEALTHY_FOR: a release that is slow to start
	start        time.Time
}

func configFromEnv(start time.Time) (config, error) {
	host, _ := os.Hostname()
	cfg := config{
		version:   currentVersion(),
		hostname:  host,
		unhealthy: os.Getenv("DEMOAPP_UNHEALTHY") == "1",
		start:     start,
	}
	if s := os.Getenv("DEMOAPP_UNHEALTHY_FOR"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return cfg, fmt.Errorf("DEMOAPP_UNHEALTHY_FOR=%q: want a duration such as 5s", s)
		}
		cfg.unhealthyFor = d
	}
	return cfg, nil
}

// newHandler takes the clock as an argument so tests can step past
// DEMOAPP_UNHEALTHY_FOR without sleeping.
func newHandler(cfg config, now func() time.Time) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, "<!doctype html><title>demoapp</title><p>demoapp <b>%s</b> on <b>%s</b></p>\n",
			html.EscapeString(cfg.version), html.EscapeString(cfg.hostname))
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		if cfg.unhealthy {
			http.Error(w, "unhealthy: DEMOAPP_UNHEALTHY=1", http.StatusInternalServerError)
			return
		}
		if left := cfg.unhealthyFor - now().Sub(cfg.start); left > 0 {
			msg := fmt.Sprintf("starting: unhealthy for another %s", left.Round(time.Millisecond))
			http.Error(w, msg, http.StatusInternalServerError)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

func serveCmd(args []string, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprintf(stderr, "demoapp serve: unexpected arguments %q\n", args)
		return 2
	}
	cfg, err := configFromEnv(time.Now())
	if err != nil {
		fmt.Fprintln(stderr, "demoapp:", err)
		return 2
	}
	port := os.Getenv("PORT")
	if port == "" {
		port = "8080"
	}
	// As PID 1 in a container nothing else turns SIGTERM into an exit.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	ln, err := net.Listen("tcp", ":"+port)
	if err != nil {
		fmt.Fprintln(stderr, "demoapp:", err)
		return 1
	}
	fmt.Fprintf(stderr, "demoapp %s listening on %s\n", cfg.version, ln.Addr())
	if err := serve(ctx, ln, newHandler(cfg, time.Now)); err != nil {
		fmt.Fprintln(stderr, "demoapp:", err)
		return 1
	}
	fmt.Fprintln(stderr, "demoapp: stopped")
	return 0
}

// serve returns nil once ctx is done and the server has shut down.
func serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close() // a client outlived the grace period; drop it rather than delay the exit
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
