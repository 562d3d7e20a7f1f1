# paymentsapi: the two commands that matter are `make run` and `make test`.
SHELL := /bin/bash
GO    ?= go
BIN   := $(CURDIR)/bin

STRIPE_MOCK_VERSION := v0.203.0
REDOCLY_VERSION     := 2.77.0
# Redoc's standalone bundle, vendored in internal/apidocs/assets (keep
# apidocs.RedocVersion in step).
REDOC_VERSION       := 2.5.4

.PHONY: ts-deps dashboard-screenshots run schema providersim test test-failover test-short sim fuzz bench bench-wal bench-micro lint fmt build tools clean-data help generate new-operation spec docs-screenshot apidocs-redoc stripe-demo

help: ## list the targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

run: ## start the service: embedded PostgreSQL, in-process provider simulator, demo key
	@echo "make run: compiling paymentsapi first (about a minute on a fresh clone, seconds once Go's build cache has it)"
	$(GO) run ./cmd/paymentsapi $(ARGS)

stripe-demo: tools ## the API on the Stripe adapter against stripe-mock with the project's fixtures, offline (dev/stripe-demo.sh)
	BIN=$(BIN) GO=$(GO) dev/stripe-demo.sh $(ARGS)

PROVIDERSIM_ADDR ?= 127.0.0.1:8081
providersim: ## start the provider simulator alone on PROVIDERSIM_ADDR (default 127.0.0.1:8081)
	$(GO) run ./cmd/providersim -addr $(PROVIDERSIM_ADDR)

build: ## build the binaries (paymentsapi, providersim, paymentsctl) into ./bin
	$(GO) build -o $(BIN)/ ./cmd/paymentsapi ./cmd/providersim ./cmd/paymentsctl

# migrations/schema.sql is the schema the numbered migrations produce (not
# those in migrations/pending/), dumped from a throwaway database as the
# tests make one (internal/pgtest); TestSchemaSQLIsWhatTheMigrationsProduce
# compares it and fails until this is run after a new migration.
schema: ## regenerate migrations/schema.sql from a freshly migrated database (pg_dump -s)
	SCHEMA_SQL_WRITE=1 $(GO) test -count=1 -v -run '^TestSchemaSQLIsWhatTheMigrationsProduce$$' ./internal/database/

# The packages that drive the idempotency engine run a second time with the
# inline committer (COMMIT_MODE=inline): the same tests hold for both.
ENGINE_PKGS := ./internal/idempotency/ ./internal/providerflow/ ./internal/payments/ ./internal/refunds/ \
	./internal/authorizations/ ./internal/endpoints/ ./internal/delivery/ ./internal/httpapi/... \
	./internal/moneysim/ ./internal/app/ ./internal/webhooks/ ./internal/audit/ ./internal/groupcommit/ \
	./examples/payouts/

test: tools ## run every test, with the race detector, on real PostgreSQL; the engine's again with the inline committer
	STRIPE_MOCK_BIN=$(BIN)/stripe-mock $(GO) test -race -count=1 -timeout 20m ./...
	TEST_COMMIT_MODE=inline $(GO) test -race -count=1 -timeout 20m $(ENGINE_PKGS)
	TEST_COMMIT_MODE=inline $(GO) test -race -count=1 -timeout 10m -run 'Killed|TwoAPIProcesses|EndToEnd' ./cmd/paymentsapi/

# The database failover tests (tools/failover): a PostgreSQL primary and
# standby, two API processes, the primary crashed or frozen and the standby
# promoted. About a minute on two cores, hence the build tag that keeps them
# out of `make test`; .ci/run runs them.
test-failover: ## the database failover tests (primary + standby, crash, freeze, lost tail), with the race detector, with each outbox reader, and the lost tail with the answer cache
	$(GO) test -race -count=1 -timeout 10m -tags failover -run 'TestFailover' ./tools/failover/
	OUTBOX_RELAY=poll $(GO) test -race -count=1 -timeout 10m -tags failover -run 'TestFailover' ./tools/failover/
	REPLAY_CACHE=memory $(GO) test -race -count=1 -timeout 10m -tags failover -run 'TestFailoverToAsynchronousStandbyLosesTheTail' ./tools/failover/

test-short: ## the tests without the race detector (faster while editing)
	$(GO) test -count=1 ./...

# The deterministic simulation of the money's life (internal/moneysim): SEEDS
# runs from a random first seed (SIM_START=n to choose it), with the default
# committer or COMMIT_MODE=inline|group; a failing seed prints the command
# that replays it. `make test` runs a few seeds in each mode.
SEEDS ?= 200
sim: ## run the money simulation for SEEDS seeds (default 200; COMMIT_MODE=inline|group); replay one with SIM_SEED=n
	TEST_COMMIT_MODE=$(COMMIT_MODE) $(GO) test -count=1 -timeout 120m -run 'TestSimulation$$' ./internal/moneysim -sim.seeds=$(SEEDS) $(if $(SIM_START),-sim.start=$(SIM_START))

# Every fuzz target, as package:target. `go test -fuzz` runs one target at a
# time; the seed corpora (testdata/fuzz/...) also run as plain tests in `make test`.
FUZZ_TARGETS := \
	./internal/idempotency/:FuzzParseKey \
	./internal/payments/:FuzzDecodeCreatePayment \
	./internal/refunds/:FuzzDecodeCreateRefund \
	./internal/payments/:FuzzFingerprintPairs \
	./internal/refunds/:FuzzFingerprintPairs \
	./internal/carddata/:FuzzContainsAgreesWithTheReference \
	./internal/httpapi/httpapitest/:FuzzTextRules
# A count of executions, not a duration: go1.26's fuzz coordinator can
# report a bare "context deadline exceeded" failure when a duration runs out
# while a worker is busy (golang/go#75804, fixed in go1.27), with no failing
# input behind it; a count has no deadline to race.
FUZZTIME ?= 5000x

fuzz: ## run each fuzz target for FUZZTIME (default 5000x, executions); a failing input is saved under the package's testdata/fuzz
	@set -e; for t in $(FUZZ_TARGETS); do \
	  echo "fuzz $${t#*:} in $${t%%:*} for $(FUZZTIME)"; \
	  $(GO) test -run '^$$' -fuzz "^$${t#*:}\$$" -fuzztime $(FUZZTIME) "$${t%%:*}"; \
	done

bench: build ## the API against pgbench and the Go floor on its own PostgreSQL, fsync on (docs/BENCHMARKS.md; ARGS='-duration 30s')
	$(GO) build -o $(BIN)/ ./tools/bench/floorapi
	$(GO) run ./tools/paymentsbench -api-bin $(BIN)/paymentsapi -floor-bin $(BIN)/floorapi $(ARGS)

bench-wal: ## WAL, records and HOT updates per new payment, on its own PostgreSQL (tools/bench/walflow; ARGS='-version 13 -waldump')
	$(GO) run ./tools/bench/walflow $(ARGS)

bench-micro: ## the Go micro-benchmarks (speed and memory are measured here, never asserted in tests)
	$(GO) test -run '^$$' -bench . -benchmem ./...

# The OpenAPI linter runs its recommended rules (redocly.yaml), with no rule
# skipped: the known exceptions are listed one by one, with their reasons, in
# .redocly.lint-ignore.yaml.
lint: ## gofmt, go vet, staticcheck, the OpenAPI linter when npx is available, and the spec through both TypeScript generators (openapi-typescript, @hey-api/openapi-ts) without a warning when node is
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet -tags failover ./...
	$(GO) tool staticcheck -tags failover ./...
	@if command -v npx >/dev/null; then \
	  npx --yes @redocly/cli@$(REDOCLY_VERSION) lint api/openapi.yaml; \
	else echo "npx not found: skipping the OpenAPI lint"; fi
	@if command -v node >/dev/null && command -v npm >/dev/null; then \
	  $(MAKE) --no-print-directory ts-deps && cd clients/typescript && node scripts/check-generators.mjs; \
	else echo "node not found: skipping the TypeScript generators' check of the spec"; fi

# api/openapi.yaml holds what every module of app.Modules contributes (its
# part of the spec, its problem codes, its events, its id member of
# Problem: internal/apispec); TestTheSpecHoldsEveryRegisteredModule fails
# until this is run after a module is registered.
spec: ## merge the registered modules' parts into api/openapi.yaml (then make generate)
	SPEC_WRITE=1 $(GO) test -count=1 -run '^TestTheSpecHoldsEveryRegisteredModule$$' ./internal/apispec/

# A new operation starts as a copy of the example (examples/payouts): the
# package under internal/$(NAME), renamed, and its migration under the next
# number. The command prints the one line to add to app.Modules.
new-operation: ## copy the example operation to internal/NAME, renamed (make new-operation NAME=transfers)
	@test -n "$(NAME)" || { echo 'usage: make new-operation NAME=transfers'; exit 2; }
	$(GO) run ./examples/newoperation -name $(NAME)

# The TypeScript client's locked dependencies, installed again only when
# package-lock.json changed (the stamp is the one its Go test writes).
ts-deps:
	@cd clients/typescript && sum=$$(sha256sum package-lock.json | cut -d' ' -f1) && \
	  if [ "$$(cat node_modules/.paymentsapi-lock-sha256 2>/dev/null)" != "$$sum" ]; then \
	    npm ci --no-audit --no-fund && echo -n "$$sum" > node_modules/.paymentsapi-lock-sha256; fi

generate: ## regenerate the Go client's types and calls from api/openapi.yaml (oapi-codegen, pinned in go.mod), and the TypeScript client's types (openapi-typescript) when node is available
	$(GO) generate ./client/...
	@if command -v node >/dev/null && command -v npm >/dev/null; then \
	  $(MAKE) --no-print-directory ts-deps && cd clients/typescript && npm run --silent generate; \
	else echo "node not found: clients/typescript/src/schema.d.ts not regenerated (its test will say so)"; fi

docs-screenshot: ## refresh docs/api-reference.png from the /docs page in headless Chromium
	APIDOCS_SCREENSHOT=$(CURDIR)/docs/api-reference.png $(GO) test -count=1 -run TestDocsPageRendersInABrowser ./internal/apidocs/

dashboard-screenshots: ## refresh docs/dashboard-*.png: the dashboard's pages, taken by its browser test in headless Chromium
	DASHBOARD_SCREENSHOTS=$(CURDIR)/docs $(GO) test -count=1 -run TestTheDashboardInABrowser ./internal/dashboard/

apidocs-redoc: ## vendor Redoc's standalone bundle (npm package redoc@REDOC_VERSION) into internal/apidocs/assets
	tmp=$$(mktemp -d) && (cd $$tmp && npm pack --silent redoc@$(REDOC_VERSION) >/dev/null && tar xzf redoc-$(REDOC_VERSION).tgz) && \
	  cp $$tmp/package/bundles/redoc.standalone.js $$tmp/package/bundles/redoc.standalone.js.LICENSE.txt internal/apidocs/assets/ && \
	  cp $$tmp/package/LICENSE internal/apidocs/assets/redoc.LICENSE && rm -rf $$tmp

fmt: ## format the code
	gofmt -w $$(git ls-files '*.go')

tools: $(BIN)/stripe-mock ## install the test tools into ./bin

$(BIN)/stripe-mock:
	GOBIN=$(BIN) $(GO) install github.com/stripe/stripe-mock@$(STRIPE_MOCK_VERSION)

clean-data: ## delete the dev database under ./.data (stop `make run` first)
	rm -rf .data
