# rollagent: `make demo` runs the main job, `make test` runs the tests.
SHELL := /usr/bin/env bash
GO ?= go
BIN := bin
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)
TEST_TIMEOUT ?= 45m
# go.mod's toolchain line names the Go patch release to build and test
# with; auto fetches it once through the module proxy when the installed go
# is older (an install may pin GOTOOLCHAIN=local in its go.env). Older
# patches carry standard library vulnerabilities that make vulncheck finds
# reachable from rollagent.
export GOTOOLCHAIN ?= auto

.PHONY: all build consul promtool test test-unit test-integration nemesis vet fuzz bench bench-lockstep bench-agent bench-fleet demo demo-down compose-images vulncheck clean

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/rollagent ./cmd/rollagent

# The real Consul server, built once into the user cache dir (outside the clone).
consul:
	@scripts/consul.sh

# promtool, for the example alert rules' tests: unpacked once from Debian's
# prometheus package into the user cache dir (no Prometheus is installed).
promtool:
	@scripts/promtool.sh

STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

vet:
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

# Every package but integration, all under -race: most of them run goroutines.
# Without a promtool (no apt-get to fetch one) the alert rules' test skips,
# and fails under CI=true.
test-unit: consul
	ROLLAGENT_CONSUL="$$(scripts/consul.sh)" ROLLAGENT_PROMTOOL="$$(scripts/promtool.sh || true)" $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $$($(GO) list ./... | grep -v /integration)

# One package at a time: the cluster's containers and Chromium do not
# compete for the machine's cores.
test-integration: consul
	ROLLAGENT_CONSUL="$$(scripts/consul.sh)" $(GO) test -p 1 -count=1 -timeout $(TEST_TIMEOUT) -v ./integration/...

# The nemesis alone (the cluster's setup, then its faults), for longer than
# the 3 minutes test-integration gives it. NEMESIS_SEEDS runs several seeds
# in one go on one cluster: "1 2 3" replays those, "x5" draws five; each
# run prints its seed first, and each seed's result (its violations, or
# none) is printed on a line of its own at the end, also kept in
# NEMESIS_LOG with the whole run.
NEMESIS_DURATION ?= 10m
NEMESIS_SEEDS ?=
NEMESIS_TIMEOUT ?= 6h
NEMESIS_LOG ?= nemesis.log

nemesis: consul
	@set -o pipefail; ROLLAGENT_CONSUL="$$(scripts/consul.sh)" NEMESIS_DURATION=$(NEMESIS_DURATION) NEMESIS_SEEDS="$(NEMESIS_SEEDS)" \
		$(GO) test -p 1 -count=1 -timeout $(NEMESIS_TIMEOUT) -v -run 'TestCluster$$/nemesis' ./integration/ 2>&1 | tee $(NEMESIS_LOG); \
		rc=$$?; echo "--- nemesis results (full log: $(NEMESIS_LOG))"; grep '^nemesis seed' $(NEMESIS_LOG); exit $$rc

# A count, not a duration: with a duration, Go before 1.27 can fail a target
# with a bare "context deadline exceeded" when -fuzztime runs out while a
# worker is busy (golang/go#75804), which CI met on a loaded machine. 100000
# runs take 5-11 s per target here; -timeout still bounds each one.
FUZZTIME ?= 100000x

# A short pass of every fuzz target in every package; go test -fuzz takes one
# target of one package at a time. Only packages with fuzz targets are
# listed, so no other package's TestMain runs.
fuzz:
	@for d in $$(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u); do \
		for t in $$($(GO) test -list '^Fuzz' $$d | grep '^Fuzz'); do \
			echo "fuzz $$d $$t"; \
			$(GO) test $$d -run '^$$' -fuzz "^$$t\$$" -fuzztime $(FUZZTIME) -timeout 5m || exit 1; \
		done; \
	done

# govulncheck against a database built from the golang.org/x/vulndb module,
# cached in the user cache dir: needs nothing but the Go module proxy. It
# fails on a reachable vulnerability that scripts/vulncheck-accepted.txt
# does not list with a reason.
vulncheck:
	scripts/vulncheck.sh

test: vet vulncheck test-unit test-integration fuzz

bench-lockstep: consul
	ROLLAGENT_CONSUL="$$(scripts/consul.sh)" $(GO) test -run '^$$' -bench . -benchtime 1x -timeout 60m ./lockstep/

bench-agent: consul
	ROLLAGENT_CONSUL="$$(scripts/consul.sh)" AGENT_BENCH_MD="$(CURDIR)/BENCHMARKS.md" $(GO) test -run '^$$' -bench 'BenchmarkAgent(Failover|Cancel|Idle|FenceGap)' -benchtime 1x -timeout 30m ./agent/

# Each fleet case runs this many times, round the list of cases, and the
# report gives its median: one run on a noisy machine can be 50% off.
FLEET_BENCH_RUNS ?= 3
# -bench Fleet runs BenchmarkFleet, BenchmarkFleetTimed (replacement time,
# about 6 min a run at N = 1,000) and BenchmarkFleetCancel (issue 30).
FLEET_BENCH_TIMEOUT ?= 180m

bench-fleet: consul
	ROLLAGENT_CONSUL="$$(scripts/consul.sh)" FLEET_BENCH_MD="$(CURDIR)/BENCHMARKS.md" FLEET_BENCH_RUNS=$(FLEET_BENCH_RUNS) $(GO) test -run '^$$' -bench Fleet -benchtime 1x -timeout $(FLEET_BENCH_TIMEOUT) ./agent/

# Every benchmark: lockstep against its peers, and hashspec's hostile inputs
# as a multiple of a valid parse.
bench: bench-lockstep bench-agent bench-fleet
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
