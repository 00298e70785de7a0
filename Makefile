# agentenkit — everyday commands. `make` (or `make help`) lists them.
#
# Services: PostgreSQL and RabbitMQ on 127.0.0.1 by default; point DATABASE_URL / AMQP_URL
# elsewhere to use other servers (then nothing is started or installed locally).
#   DATABASE_URL       used by migrate and demo     (default .../agentenkit)
#   TEST_DATABASE_URL  given to the tests as DATABASE_URL (default .../agentenkit_test,
#                      or DATABASE_URL when that is set in the environment)
#   AMQP_URL           used by everything           (default amqp://guest:guest@127.0.0.1:5672/%2f)

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
.NOTPARALLEL:
MAKEFLAGS += --no-print-directory

CARGO ?= cargo

ifeq ($(origin DATABASE_URL),undefined)
DATABASE_URL := postgres://postgres@127.0.0.1:5432/agentenkit
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/agentenkit_test
else
TEST_DATABASE_URL ?= $(DATABASE_URL)
endif
AMQP_URL ?= amqp://guest:guest@127.0.0.1:5672/%2f
export DATABASE_URL TEST_DATABASE_URL AMQP_URL

PEERS_RUN ?= $(CURDIR)/../shared/peers/run.sh

.PHONY: help services build migrate demo fmt-check clippy shape validate-k8s test web-test ui screenshots bench bench-peers bench-park-many bench-callgrind chaos clean-test-schemas

help: ## list the targets
	@echo "agentenkit — make targets:"
	@grep -E '^[a-z][a-zA-Z_-]*:.*## ' $(firstword $(MAKEFILE_LIST)) | \
	  awk 'BEGIN { FS = ":.*## " } { printf "  %-20s %s\n", $$1, $$2 }'
	@echo "Services: DATABASE_URL=$(DATABASE_URL)"
	@echo "          TEST_DATABASE_URL=$(TEST_DATABASE_URL)"
	@echo "          AMQP_URL=$(AMQP_URL)"

services: ## make PostgreSQL and RabbitMQ available (start, or install as root on Debian) and create the databases
	@bash scripts/services.sh

build: ## build every crate, binaries and tests
	$(CARGO) build --workspace --all-targets

migrate: services ## apply the migrations to DATABASE_URL
	$(CARGO) run -q --bin agentenkit -- migrate

demo: services build ## a scripted conversation end to end, printed as a transcript
	$(CARGO) run -q --bin agentenkit -- demo

fmt-check: ## rustfmt, check only
	$(CARGO) fmt --all -- --check

clippy: ## clippy on everything, warnings are errors
	$(CARGO) clippy --workspace --all-targets -- -D warnings

shape: ## no product file over 600 lines, no product function over 80 (scripts/shape.py --check)
	python3 scripts/shape.py --check

validate-k8s: ## the Kubernetes manifests against the API schemas (kubernetes-validate from PyPI, strict)
	@bash scripts/validate-k8s.sh

test: services fmt-check clippy shape validate-k8s ## services, fmt-check, clippy, shape, manifests, then every test against real Postgres and RabbitMQ
	@export DATABASE_URL="$$TEST_DATABASE_URL"; rc=0; \
	if $(CARGO) nextest --version >/dev/null 2>&1; then \
	  echo "+ cargo test --workspace --doc"; \
	  $(CARGO) test --workspace --doc --no-fail-fast -q || rc=$$?; \
	  echo "+ cargo nextest run --workspace --run-ignored only --test-threads 1   # tests that restart the broker, alone"; \
	  $(CARGO) nextest run --workspace --run-ignored only --test-threads 1 --no-fail-fast --no-tests=pass || rc=$$?; \
	  echo "+ DATABASE_URL=$$DATABASE_URL cargo nextest run --workspace --no-fail-fast"; \
	  $(CARGO) nextest run --workspace --no-fail-fast --no-tests=fail || rc=$$?; \
	  echo "+ scripts/web-test.sh   # crates/web: typecheck, the committed page build, vitest and the page in chromium against a real agentenkit dev"; \
	  bash scripts/web-test.sh || rc=$$?; \
	else \
	  echo "+ DATABASE_URL=$$DATABASE_URL cargo test --workspace --no-fail-fast"; \
	  $(CARGO) test --workspace --no-fail-fast -- --include-ignored --test-threads 1 || rc=$$?; \
	  bash scripts/web-test.sh || rc=$$?; \
	fi; \
	exit $$rc

web-test: services ## crates/web alone: npm ci, typecheck, the committed page build is current, vitest, the page end to end in chromium
	@export DATABASE_URL="$$TEST_DATABASE_URL"; bash scripts/web-test.sh

ui: ## rebuild the inbox page into crates/api/ui (commit the result: the API embeds it)
	cd crates/web && npm ci --no-audit --no-fund --loglevel=error && npm run -w agentenkit-inbox build

screenshots: services ## the inbox guide's screenshots (docs/screenshots, shown by docs/inbox.md), taken by the page's end-to-end tests
	@export DATABASE_URL="$$TEST_DATABASE_URL" AGENTENKIT_SCREENSHOTS="$(CURDIR)/docs/screenshots"; bash scripts/web-test.sh

bench: ## the agentenkit benchmark (release build)
	@if ! $(CARGO) metadata --no-deps --format-version 1 2>/dev/null | grep -q '"name":"agentenkit-bench"'; then \
	  echo "make bench: no bench binary yet (no target named agentenkit-bench in the workspace)" >&2; \
	  exit 1; \
	fi
	@bash scripts/services.sh
	$(CARGO) build --release -q --bin agentenkit-bench --bin agentenkit-worker
	target/release/agentenkit-bench $(BENCH_ARGS)

bench-callgrind: ## instructions per cycle in the bench process, by callgrind (stable on a noisy machine)
	@bash scripts/services.sh
	bash scripts/bench-callgrind.sh $(CALLGRIND_ARGS)

bench-park-many: ## park 100,000 threads on one worker process and report its memory as they pile up
	@$(MAKE) bench BENCH_ARGS="--n 200 --expiry-n 0 --round-trip-n 0 --scale-n 0 --shares-n 0 --park-many 100000"

bench-peers: ## the peer benchmark (LangGraph, DBOS, raw Postgres/RabbitMQ) if present, then the bench, whose ratios read its fresh results
	@if [ -f "$(PEERS_RUN)" ]; then \
	  bash "$(PEERS_RUN)"; \
	else \
	  echo "make bench-peers: the peer benchmark is absent ($(PEERS_RUN) not found)" >&2; \
	fi
	@$(MAKE) bench

CHAOS_ARGS ?=
chaos: ## faults on purpose: 1,000 runs while workers are killed and the API, RabbitMQ and Postgres restart; checked from the outside (CHAOS_ARGS="--runs 200 --queue-type quorum")
	@bash scripts/services.sh
	$(CARGO) build --release -q --bin agentenkit-chaos --bin agentenkit-api --bin agentenkit-worker --bin agentenkit-reaper
	target/release/agentenkit-chaos --json target/chaos.json $(CHAOS_ARGS)

clean-test-schemas: ## drop the t_* schemas that tests left in the test database
	@n=$$(psql "$$TEST_DATABASE_URL" -X -qAt -v ON_ERROR_STOP=1 \
	    -c "select count(*) from pg_namespace where nspname like 't\_%'"); \
	echo "dropping $$n test schemas in $$TEST_DATABASE_URL"; \
	PGOPTIONS='-c client_min_messages=warning' psql "$$TEST_DATABASE_URL" -X -qAt -v ON_ERROR_STOP=1 <<< \
	  "select format('drop schema if exists %I cascade', nspname) from pg_namespace where nspname like 't\_%' \gexec" \
	  >/dev/null
