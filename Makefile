# paymentsapi: the two commands that matter are `make run` and `make test`.
SHELL := /bin/bash
GO    ?= go
BIN   := $(CURDIR)/bin

STRIPE_MOCK_VERSION := v0.203.0
REDOCLY_VERSION     := 2.77.0

.PHONY: run providersim test test-short bench lint fmt build tools clean-data help

help: ## list the targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

run: ## start the service: embedded PostgreSQL, in-process provider simulator, demo key
	$(GO) run ./cmd/paymentsapi $(ARGS)

providersim: ## start the provider simulator alone on 127.0.0.1:8081
	$(GO) run ./cmd/providersim -addr 127.0.0.1:8081

build: ## build both binaries into ./bin
	$(GO) build -o $(BIN)/ ./cmd/paymentsapi ./cmd/providersim

test: tools ## run every test, with the race detector, on real PostgreSQL
	STRIPE_MOCK_BIN=$(BIN)/stripe-mock $(GO) test -race -count=1 -timeout 20m ./...

test-short: ## the tests without the race detector (faster while editing)
	$(GO) test -count=1 ./...

bench: ## run the benchmarks (speed and memory are measured here, never asserted in tests)
	$(GO) test -run '^$$' -bench . -benchmem ./...

lint: ## gofmt, go vet, staticcheck, and the OpenAPI linter when npx is available
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) tool staticcheck ./...
	@if command -v npx >/dev/null; then \
	  npx --yes @redocly/cli@$(REDOCLY_VERSION) lint api/openapi.yaml \
	    --skip-rule=info-license --skip-rule=no-server-example.com --skip-rule=operation-4xx-response; \
	else echo "npx not found: skipping the OpenAPI lint"; fi

fmt: ## format the code
	gofmt -w $$(git ls-files '*.go')

tools: $(BIN)/stripe-mock ## install the test tools into ./bin

$(BIN)/stripe-mock:
	GOBIN=$(BIN) $(GO) install github.com/stripe/stripe-mock@$(STRIPE_MOCK_VERSION)

clean-data: ## delete the dev database under ./.data (stop `make run` first)
	rm -rf .data
