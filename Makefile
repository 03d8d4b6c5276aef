# storybus — `make help` lists the targets.
SHELL := /usr/bin/env bash
GO ?= go
BIN := $(CURDIR)/bin
# Brief fuzzing is bounded by executions per target (about 10 s each here),
# not by time: Go 1.26's fuzzing coordinator can fail a time-bounded run at
# its deadline with a spurious "context deadline exceeded" (Go issue 75804,
# fixed in Go 1.27). FUZZTIME overrides them all, e.g. FUZZTIME=10m.
FUZZ_PARSE_EXECS ?= 20000x
FUZZ_PUBLISH_EXECS ?= 3000x
FUZZ_ACK_EXECS ?= 10000x
FUZZTIME ?=
# Minimising each new interesting input may take Go its default 60 s of
# publishes, which would stall a brief run; keep it short.
FUZZMINIMIZETIME ?= 2s
GOTEST_FLAGS ?= -timeout 30m

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*##/ {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# The version stamped into the binary (`storybus version`, the logs,
# storybus_build_info): the nearest tag as git describe gives it, else the
# chart's appVersion. The commit is stamped too, because a build with
# -buildvcs=false (the CI's) records none itself; `--exclude '*'` makes git
# describe give the full commit, with -dirty for uncommitted changes.
VERSION ?= $(or $(shell git describe --tags --dirty 2>/dev/null),$(APP_VERSION))
COMMIT ?= $(shell git describe --always --dirty --abbrev=40 --exclude '*' 2>/dev/null)
BUILDINFO := github.com/storybus/storybus/internal/buildinfo
LDFLAGS = -X $(BUILDINFO).version=$(VERSION) -X $(BUILDINFO).commit=$(COMMIT)

.PHONY: build
build: ## Build the storybus binary into bin/, stamped with VERSION and COMMIT.
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags="$(LDFLAGS)" -o $(BIN)/storybus ./cmd/storybus

.PHONY: dev
dev: ## Run the bus on the sample workspace with embedded JetStream.
	$(GO) run ./cmd/storybus dev

.PHONY: tools
tools: envtest-tools ## Build kube-apiserver, etcd and helm from the Go module proxy into bin/; install promtool when missing.
	hack/promtool.sh

.PHONY: envtest-tools
envtest-tools: ## Build kube-apiserver, etcd and helm from the Go module proxy into bin/.
	hack/envtest-binaries.sh

# controller-gen comes from its own pinned module (hack/tools/controller-gen),
# never from the root go.mod; it is rebuilt when that module changes.
CONTROLLER_GEN := $(BIN)/controller-gen
CONTROLLER_GEN_CRD := rbac:roleName=storybus-operator crd paths=./api/... paths=./controllers/...
CONTROLLER_GEN_OBJECT := object:headerFile=hack/boilerplate.go.txt paths=./api/...

$(CONTROLLER_GEN): hack/tools/controller-gen/go.mod hack/tools/controller-gen/go.sum
	cd hack/tools/controller-gen && GOWORK=off CGO_ENABLED=0 GOFLAGS=-mod=readonly $(GO) build -trimpath -o $(CONTROLLER_GEN) sigs.k8s.io/controller-tools/cmd/controller-gen

# staticcheck, likewise, comes from hack/tools/staticcheck.
STATICCHECK := $(BIN)/staticcheck

$(STATICCHECK): hack/tools/staticcheck/go.mod hack/tools/staticcheck/go.sum
	cd hack/tools/staticcheck && GOWORK=off CGO_ENABLED=0 GOFLAGS=-mod=readonly $(GO) build -trimpath -o $(STATICCHECK) honnef.co/go/tools/cmd/staticcheck

# oapi-codegen, likewise, comes from hack/tools/oapi-codegen; openapi-typescript
# and tsc are pinned in hack/openapi-typescript's package-lock.json.
OAPI_CODEGEN := $(BIN)/oapi-codegen

$(OAPI_CODEGEN): hack/tools/oapi-codegen/go.mod hack/tools/oapi-codegen/go.sum
	cd hack/tools/oapi-codegen && GOWORK=off CGO_ENABLED=0 GOFLAGS=-mod=readonly $(GO) build -trimpath -o $(OAPI_CODEGEN) github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate the CRDs (config/crd/bases), RBAC (config/rbac) and deepcopy code of api/.
	$(CONTROLLER_GEN) $(CONTROLLER_GEN_OBJECT)
	$(CONTROLLER_GEN) $(CONTROLLER_GEN_CRD) output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac
	$(MAKE) chart-sync

.PHONY: verify-manifests
verify-manifests: $(CONTROLLER_GEN) ## Fail when the CRDs, RBAC or deepcopy code differ from what `make manifests` makes.
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	$(CONTROLLER_GEN) $(CONTROLLER_GEN_OBJECT) output:object:dir=$$tmp/object && \
	$(CONTROLLER_GEN) $(CONTROLLER_GEN_CRD) output:crd:dir=$$tmp/crd output:rbac:dir=$$tmp/rbac && \
	diff -u api/v1alpha1/zz_generated.deepcopy.go $$tmp/object/zz_generated.deepcopy.go && \
	diff -ru config/crd/bases $$tmp/crd && \
	diff -ru config/rbac $$tmp/rbac || { echo "generated files are stale: run make manifests"; exit 1; }

# The Helm chart reads copies of the generated CRDs and ClusterRole from its
# files/ (a chart cannot read outside its directory).
CHART := charts/storybus

.PHONY: chart-sync
chart-sync: ## Copy the CRDs (config/crd/bases) and the operator's RBAC (config/rbac) into the Helm chart.
	rm -rf $(CHART)/files/crds
	mkdir -p $(CHART)/files/crds $(CHART)/files/rbac
	cp config/crd/bases/*.yaml $(CHART)/files/crds/
	cp config/rbac/role.yaml $(CHART)/files/rbac/role.yaml

.PHONY: verify-chart
verify-chart: ## Fail when the chart's CRDs or RBAC differ from config/, or its README's values table from values.yaml.
	@diff -ru config/crd/bases $(CHART)/files/crds && diff -u config/rbac/role.yaml $(CHART)/files/rbac/role.yaml \
		|| { echo "the chart's CRDs or RBAC are stale: run make chart-sync"; exit 1; }
	$(GO) test ./charts/ -run '^(TestChartFilesMatchConfig|TestValuesTable)$$'

# `make image` tags the image with the chart's appVersion, the tag the chart
# runs by default (IMAGE_VERSION overrides it), for the machine's
# architecture (IMAGE_ARCH overrides it, e.g. IMAGE_ARCH=arm64).
APP_VERSION = $(shell sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$$/\1/p' $(CHART)/Chart.yaml)
IMAGE_VERSION ?= $(APP_VERSION)
IMAGE_ARCH ?= $(shell $(GO) env GOARCH)

.PHONY: image
image: ## Build the storybus image as bin/storybus-image.tar (no Docker engine needed), stamped like build.
	CGO_ENABLED=0 GOOS=linux GOARCH=$(IMAGE_ARCH) $(GO) build -trimpath -ldflags="-s -w $(LDFLAGS)" -o $(BIN)/image/storybus ./cmd/storybus
	$(GO) run ./internal/image/cmd/build-image -binary $(BIN)/image/storybus -tag ghcr.io/storybus/storybus:$(IMAGE_VERSION) -o $(BIN)/storybus-image.tar

# The packages whose code runs concurrently (the bus, its store, limits,
# publish core and policy, the operator's controllers on envtest and the
# operator process of the scale test, the client, the CLI's in-process
# commands, the benchmark's producers, the file watcher): `make race` and
# `make test` run their tests under the race detector. The rest, among them
# cmd/storybus (the crash drills SIGKILL a built binary, which would never
# print a report) and internal/image (builds an image, nothing concurrent,
# four minutes under the detector), run without it.
RACE_PKGS := ./bus/... ./policy/... ./controllers/... ./client/... ./cmd/storybus/cli/ ./bench/... ./internal/filewatch/
OTHER_PKGS = $(filter-out $(shell $(GO) list $(RACE_PKGS)),$(shell $(GO) list ./...))

.PHONY: test
test: tools test-openapi-generators test-python test-typescript ## Run every test once: unit, integration (embedded JetStream, envtest, helm), Rego, the concurrent packages under the race detector, brief fuzzing, the generators on docs/openapi.yaml, and the Python and TypeScript clients.
	KUBEBUILDER_ASSETS=$(BIN) $(GO) test $(GOTEST_FLAGS) $(OTHER_PKGS)
	$(MAKE) race
	$(MAKE) fuzz

# The description must give typed clients with the generators producers use:
# oapi-codegen's client has to build a program that publishes a story.context
# (hack/openapi-go), and openapi-typescript's types (default options) have to
# type every conformance message of every family as a SOMMessage, and refuse
# messages SOM 1.0 refuses (hack/openapi-typescript/check.mjs).
.PHONY: test-openapi-generators
test-openapi-generators: $(OAPI_CODEGEN) ## Generate a Go client and TypeScript types from docs/openapi.yaml, build a publishing program and type-check real messages with them.
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	cp hack/openapi-go/main.go hack/openapi-go/go.mod hack/openapi-go/go.sum $$tmp/ && \
	$(OAPI_CODEGEN) -config hack/openapi-go/oapi-codegen.yaml -o $$tmp/api.gen.go docs/openapi.yaml && \
	(cd $$tmp && GOWORK=off GOFLAGS=-mod=readonly $(GO) build -o /dev/null .) && \
	echo "oapi-codegen: the generated client builds hack/openapi-go, a program that publishes a story.context"
	cd hack/openapi-typescript && npm ci --no-audit --no-fund --loglevel=error && node check.mjs

# The Python client's tests (clients/python): pytest, against storybus dev
# built by `make build`, the conformance scenarios included. PYTHON is the
# first of python3 and Debian's /usr/bin/python3 that has pytest (Debian's
# python3-pytest, which .ci/run installs when none has it).
PYTHON ?= $(shell for p in python3 /usr/bin/python3; do $$p -c 'import pytest' >/dev/null 2>&1 && { echo $$p; break; }; done)

.PHONY: test-python
test-python: build ## Run the Python client's tests (clients/python) against storybus dev, the conformance scenarios included.
	@test -n "$(PYTHON)" || { echo "test-python needs pytest: apt-get install python3-pytest"; exit 1; }
	cd clients/python && STORYBUS_BIN=$(BIN)/storybus $(PYTHON) -m pytest

# The TypeScript client's tests (clients/typescript): npm ci, tsc, and
# node --test against storybus dev built by `make build`, the conformance
# scenarios, the docs' examples, the drift of its types from
# docs/openapi.yaml and the packed package included.
.PHONY: test-typescript
test-typescript: build ## Run the TypeScript client's tests (clients/typescript) against storybus dev, the conformance scenarios included.
	cd clients/typescript && npm ci --no-audit --no-fund --loglevel=error && npm run build && STORYBUS_BIN=$(BIN)/storybus npm test

# clients/typescript/src/openapi.ts is generated from docs/openapi.yaml by
# the client's pinned openapi-typescript.
.PHONY: typescript-types
typescript-types: ## Regenerate the TypeScript client's wire types (clients/typescript/src/openapi.ts) from docs/openapi.yaml.
	cd clients/typescript && npm ci --no-audit --no-fund --loglevel=error && npm run generate

.PHONY: verify-typescript-types
verify-typescript-types: ## Fail when clients/typescript/src/openapi.ts differs from what `make typescript-types` makes.
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	cd clients/typescript && npm ci --no-audit --no-fund --loglevel=error && \
	node_modules/.bin/openapi-typescript ../../docs/openapi.yaml -o $$tmp/openapi.ts >/dev/null && \
	diff -u src/openapi.ts $$tmp/openapi.ts || { echo "clients/typescript/src/openapi.ts is stale: run make typescript-types"; exit 1; }

.PHONY: race
race: envtest-tools ## Run the tests of every package whose code runs concurrently under the race detector (go test -race).
	KUBEBUILDER_ASSETS=$(BIN) $(GO) test -race $(GOTEST_FLAGS) $(RACE_PKGS)

.PHONY: fuzz
fuzz: ## Fuzz the SOM parser, the publish handler and the ack ids briefly (FUZZTIME=10m for longer).
	$(GO) test -run='^$$' -fuzz='^FuzzParseValidate$$' -fuzztime=$(or $(FUZZTIME),$(FUZZ_PARSE_EXECS)) -fuzzminimizetime=$(FUZZMINIMIZETIME) ./bus/som/
	$(GO) test -run='^$$' -fuzz='^FuzzPublish$$' -fuzztime=$(or $(FUZZTIME),$(FUZZ_PUBLISH_EXECS)) -fuzzminimizetime=$(FUZZMINIMIZETIME) ./bus/
	$(GO) test -run='^$$' -fuzz='^FuzzAckSubject$$' -fuzztime=$(or $(FUZZTIME),$(FUZZ_ACK_EXECS)) -fuzzminimizetime=$(FUZZMINIMIZETIME) ./bus/

.PHONY: lint
lint: $(STATICCHECK) ## gofmt, go vet and staticcheck.
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet -tags scale ./...
	$(STATICCHECK) -tags scale ./...

.PHONY: scale
scale: tools ## Reconcile 500 Tenants with 5,000 Connections against envtest: time to Ready and the operator's memory.
	STORYBUS_SCALE=full KUBEBUILDER_ASSETS=$(BIN) $(GO) test -count=1 -timeout 60m -run '^TestOperatorAtScale$$' -v ./controllers/scale/

# The pool benchmark (controllers/scale/pool_test.go) is built with the
# scale tag, which keeps it out of make test; POOL_TENANTS and
# POOL_ONBOARD set other sizes.
.PHONY: scale-pool
scale-pool: tools ## Place 1,000 Tenants with 10,000 Connections on a 3-replica pool (envtest, serve --pool processes, a 3-node NATS cluster): time to Ready, onboarding p99, a rotation and a removal on every replica.
	STORYBUS_SCALE=full STORYBUS_POOL_TENANTS=$(POOL_TENANTS) STORYBUS_POOL_ONBOARD=$(POOL_ONBOARD) KUBEBUILDER_ASSETS=$(BIN) $(GO) test -tags scale -count=1 -timeout 90m -run '^TestPoolAtScale$$' -v ./controllers/scale/

# What idle pooled workspaces cost a three-node NATS cluster
# (bus/store/atrest_test.go, built with the scale tag); REST_WORKSPACES
# sets the sizes, comma-separated.
REST_WORKSPACES ?= 0,100,300,1000
.PHONY: scale-cluster
scale-cluster: ## Open none, 100, 300 and 1,000 pooled workspaces on a 3-node NATS cluster and read the servers' CPU at rest.
	STORYBUS_REST_WORKSPACES=$(REST_WORKSPACES) $(GO) test -tags scale -count=1 -timeout 30m -run '^TestClusterAtRest$$' -v ./bus/store/

# The upgrade prober's short form runs in make test (cmd/storybus); this is
# its long form: more producers and stories, three cycles.
.PHONY: test-upgrade
test-upgrade: ## Run the upgrade prober's long form: pool replicas rolled and killed, NATS nodes lost and restarted, under producers, three cycles.
	STORYBUS_UPGRADE=long $(GO) test -count=1 -timeout 30m -run '^TestUpgradeProber$$' -v ./cmd/storybus/

# The kill-and-recover measure's short form runs in make test
# (cmd/storybus); this is its long form, whose figures docs/durability.md
# records: 25 s of 16 producers before each of three SIGKILLs.
.PHONY: test-recovery
test-recovery: ## Kill an embedded bus with SIGKILL under 16 producers, three times, and time kill to ready and to the first 2xx, part by part.
	STORYBUS_RECOVERY=long $(GO) test -count=1 -timeout 20m -run '^TestKilledUnderProducersComesBack$$' -v ./cmd/storybus/

.PHONY: bench
bench: ## Benchmark publishing through the bus against HTTP relay and raw JetStream baselines, both fsync modes.
	$(GO) run ./cmd/storybus bench --sync always
	$(GO) run ./cmd/storybus bench --sync interval

# The nats-server that go.mod requires, for the benchmarks on local
# clusters (the build cache makes it cheap after the first time).
.PHONY: nats-server
nats-server:
	$(GO) build -o $(BIN)/nats-server github.com/nats-io/nats-server/v2

.PHONY: bench-cluster
bench-cluster: nats-server ## Benchmark the bus against the HTTP relays on three local nats-server processes (R3), 16 producers across 10 workspaces.
	$(GO) run ./cmd/storybus bench --cluster 3 --nats-server $(BIN)/nats-server --workspaces 10 --producers 16 \
		--sync interval --phases bus,relay,relay-two-write --rounds 5 --duration 8s

.PHONY: bench-density
bench-density: ## Benchmark a pool replica's memory per idle workspace and its start at 100, 500 and 1,000 workspaces of 10 connections.
	$(GO) run ./cmd/storybus bench density --workspaces 100,500,1000 --connections 10

# DENSITY_WORKSPACES are bench-density-cluster's levels.
DENSITY_WORKSPACES ?= 100,500,1000
.PHONY: bench-density-cluster
bench-density-cluster: nats-server ## The same on three local nats-server processes, every stream and bucket with three replicas, as a pool's cluster.
	$(GO) run ./cmd/storybus bench density --cluster 3 --nats-server $(BIN)/nats-server --workspaces $(DENSITY_WORKSPACES) --connections 10

.PHONY: bench-isolation
bench-isolation: ## Benchmark a workspace's p99 alone and while another is flooded (a deadline-tripping module, 10x its rate limit).
	$(GO) test -run='^$$' -bench='^BenchmarkNeighbourUnderFlood$$' -benchtime=1x ./bus/

.PHONY: docs
docs: ## Regenerate the generated docs (docs/rules.md).
	$(GO) test ./rules/ -run TestDocMatchesCatalogue -update

.PHONY: verify
verify: lint verify-manifests verify-chart verify-typescript-types ## Lint, and fail when generated files or go.mod/go.sum are stale.
	$(GO) test ./rules/ -run TestDocMatchesCatalogue
	$(GO) mod tidy -diff
