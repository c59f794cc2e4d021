package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

func defaultHealthURL() string {
	port := os.Getenv("PORT")
	if port == "" {
		port = "8080"
	}
	return "http://127.0.0.1:" + port + "/healthz"
}

// healthCmd exits 1 on any failure, flag errors included: Docker reserves a
// HEALTHCHECK exit code of 2.
func healthCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("health", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("url", defaultHealthURL(), "URL to GET")
	// Under Docker's 1s HEALTHCHECK timeout, so the health log shows our
	// reason rather than Docker's "timed out".
	timeout := fs.Duration("timeout", 900*time.Millisecond, "request timeout")
	if err := fs.Parse(args); err != nil {
		return 1
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "demoapp health: unexpected arguments %q\n", fs.Args())
		return 1
	}
	if err := checkHealth(*url, *timeout); err != nil {
		fmt.Fprintln(stderr, "unhealthy:", err)
		return 1
	}
	fmt.Fprintln(stdout, "healthy")
	return 0
}

func checkHealth(url string, timeout time.Duration) error {
	c := &http.Client{Timeout: timeout}
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}
