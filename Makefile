# rollagent: `make demo` runs the main job, `make test` runs the tests.
SHELL := /usr/bin/env bash
GO ?= go
BIN := bin
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)
TEST_TIMEOUT ?= 30m

.PHONY: all build consul test test-unit test-integration vet fuzz bench bench-lockstep demo demo-down compose-images clean

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/rollagent ./cmd/rollagent

# The real Consul server, built once into the user cache dir (outside the clone).
consul:
	@scripts/consul.sh

STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

vet:
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

# Every package but integration, all under -race: most of them run goroutines.
test-unit: consul
	ROLLAGENT_CONSUL="$$(scripts/consul.sh)" $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $$($(GO) list ./... | grep -v /integration)

test-integration: consul
	ROLLAGENT_CONSUL="$$(scripts/consul.sh)" $(GO) test -count=1 -timeout $(TEST_TIMEOUT) -v ./integration/...

# A short pass of every fuzz target; go test -fuzz takes one target at a time.
fuzz:
	@for t in $$($(GO) test -list '^Fuzz' ./hashspec/ | grep ^Fuzz); do \
		$(GO) test ./hashspec/ -run '^$$' -fuzz "^$$t\$$" -fuzztime 10s || exit 1; \
	done

test: vet test-unit test-integration fuzz

bench-lockstep: consul
	ROLLAGENT_CONSUL="$$(scripts/consul.sh)" $(GO) test -run '^$$' -bench . -benchtime 1x -timeout 60m ./lockstep/

# Every benchmark: lockstep against its peers, and hashspec's hostile inputs
# as a multiple of a valid parse.
bench: bench-lockstep
	$(GO) test -run '^$$' -bench . ./hashspec/

# A local Consul with its UI, 5 agents and a real rollout; left running.
demo: build consul
	$(GO) run ./internal/demo -consul "$$(scripts/consul.sh)" -rollagent $(BIN)/rollagent up

demo-down:
	$(GO) run ./internal/demo down

# The images docs/examples/compose runs, built FROM scratch (no registry).
compose-images: build consul
	$(GO) run ./internal/demo -consul "$$(scripts/consul.sh)" -rollagent $(BIN)/rollagent images

clean:
	rm -rf $(BIN)
