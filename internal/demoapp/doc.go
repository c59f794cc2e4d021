// Command demoapp is the workload that rollagent rolls out in tests and in
// `make demo`: a static HTTP server with a health endpoint whose health can be
// broken on purpose, so a "bad release" is just an image with a different ENV.
//
// Usage:
//
//	demoapp [serve]              serve HTTP on :$PORT (default 8080)
//	demoapp --version            print the version and exit
//	demoapp health [--url URL]   GET URL once; exit 0 on 200, else 1
//
// The version comes from -ldflags "-X main.version=..." unless DEMOAPP_VERSION
// is set: one binary baked into several images then reports several versions.
//
// /healthz answers 500 while DEMOAPP_UNHEALTHY=1 is set, and for the first
// DEMOAPP_UNHEALTHY_FOR (a Go duration such as "5s") after start. The health
// subcommand exists because a FROM-scratch image has no curl for a Docker
// HEALTHCHECK.
package main
