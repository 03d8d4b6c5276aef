# storybus — `make help` lists the targets.
SHELL := /usr/bin/env bash
GO ?= go
BIN := $(CURDIR)/bin
FUZZTIME ?= 10s
GOTEST_FLAGS ?= -timeout 30m

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*##/ {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build the storybus binary into bin/.
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/storybus ./cmd/storybus

.PHONY: dev
dev: ## Run the bus on the sample workspace with embedded JetStream.
	$(GO) run ./cmd/storybus dev

.PHONY: tools
tools: ## Build kube-apiserver, etcd and helm from the Go module proxy into bin/.
	hack/envtest-binaries.sh

.PHONY: test
test: tools ## Run every test: unit, integration (embedded JetStream, envtest, helm), Rego, and brief fuzzing.
	KUBEBUILDER_ASSETS=$(BIN) $(GO) test $(GOTEST_FLAGS) ./...
	$(MAKE) fuzz

.PHONY: fuzz
fuzz: ## Fuzz the parsers and the publish handler for FUZZTIME each.
	$(GO) test -run='^$$' -fuzz='^FuzzParseValidate$$' -fuzztime=$(FUZZTIME) ./bus/som/
	$(GO) test -run='^$$' -fuzz='^FuzzPublish$$' -fuzztime=$(FUZZTIME) ./bus/

.PHONY: lint
lint: ## gofmt and go vet.
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

.PHONY: bench
bench: ## Benchmark publishing through the bus against raw JetStream baselines, both fsync modes.
	$(GO) run ./cmd/storybus bench --sync always
	$(GO) run ./cmd/storybus bench --sync interval

.PHONY: docs
docs: ## Regenerate the generated docs (docs/rules.md).
	$(GO) test ./bus/rules/ -run TestDocMatchesCatalogue -update

.PHONY: verify
verify: lint ## Fail when generated files are stale.
	$(GO) test ./bus/rules/ -run TestDocMatchesCatalogue
	$(GO) mod tidy -diff
