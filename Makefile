# mrtr-state: `make help` lists the targets.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-dev

.DEFAULT_GOAL := help
.PHONY: help install demo example lint docs man test bench fuzz lock clean

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | \
		awk 'BEGIN {FS = ":.*## "}; {printf "  make %-10s %s\n", $$1, $$2}'

# Development pins live in requirements/*.txt, not in extras: the wheel's metadata carries none.
$(STAMP): pyproject.toml requirements/dev.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e . -r requirements/dev.txt
	@touch $(STAMP)

install: $(STAMP) ## Create .venv if needed and install mrtr-state with its dev tools

demo: $(STAMP) ## Make keys/keyset.json if absent, then mint, verify, inspect and list keys
	@PATH="$(CURDIR)/$(BIN):$$PATH" bash scripts/demo.sh

example: $(STAMP) ## Run the MCP SDK example: a stdio server eliciting a GitHub login, and a client
	@test -f keys/keyset.json || $(BIN)/mrtr-state keys init
	$(BIN)/python examples/client.py

lint: $(STAMP) ## ruff (lint and format check), mypy --strict, and bash -n on every shell script
	@for script in .ci/run $$(git ls-files '*.sh' 2>/dev/null || find . -name '*.sh' -not -path './.venv/*'); do \
	  bash -n "$$script" || { echo "shell syntax error in $$script" >&2; exit 1; }; done
	$(BIN)/ruff check mrtr_state tests bench examples scripts fuzz
	$(BIN)/ruff format --check mrtr_state tests bench examples scripts fuzz
	$(BIN)/mypy

DOCS_STAMP := $(VENV)/.installed-docs
$(DOCS_STAMP): $(STAMP) requirements/docs.txt
	$(BIN)/python -m pip install --quiet -r requirements/docs.txt
	@touch $(DOCS_STAMP)

docs: $(DOCS_STAMP) ## Build the documentation site into build/site (strict: a broken link fails)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

man: $(STAMP) ## Write the man page docs/man/mrtr-state.1 from the click commands
	$(BIN)/python scripts/man.py

test: lint docs ## Lint, build the docs, then the whole test suite (fails if no test ran)
	$(BIN)/python -m pytest

bench: $(STAMP) ## Benchmark against the raw primitives and peer libraries (writes bench/results.*)
	$(BIN)/python -m pip install --quiet -r requirements/dev.txt -r requirements/bench.txt
	$(BIN)/python bench/bench.py
	$(BIN)/python bench/proxy_load.py
	$(BIN)/python bench/handles.py
	$(BIN)/python bench/redis_clients.py

FUZZ_RUNS    ?= 1000000
FUZZ_SECONDS ?= 600
FUZZ_FORMATS := aead jws jwe mcp-py mcp-ts mcp-rb mcp-rs mcp-rs2 mcp-php mcp-java
FRAMING_CASES ?= 20000
fuzz: $(STAMP) ## Fuzz every token parser, and the strict JSON reader against a reference, with atheris (FUZZ_RUNS runs, at most FUZZ_SECONDS each), then the proxy's framing under both HTTP parsers (FRAMING_CASES random streams on a new seed); a crash fails, its input kept in fuzz/crashes/
	$(BIN)/python -m pip install --quiet 'atheris==3.0.0'
	@mkdir -p fuzz/crashes; log=$$(mktemp); trap 'rm -f "$$log"' EXIT; \
	for target in $(addprefix parsers:,$(FUZZ_FORMATS)) json:; do \
		$(BIN)/python fuzz/fuzz_$${target%%:*}.py $${target#*:} -atheris_runs=$(FUZZ_RUNS) \
			-max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 -artifact_prefix=fuzz/crashes/ \
			>"$$log" 2>&1; status=$$?; \
		grep -E '^(Done|stat::number_of_executed_units|fuzz |==[0-9]+==)' "$$log"; \
		if [ $$status -ne 0 ]; then \
			tail -n 40 "$$log" >&2; echo "fuzz $$target: exit $$status; a crashing input is kept in fuzz/crashes/" >&2; \
			exit 1; fi; \
	done
	@seed=$$(od -An -N4 -tu4 /dev/urandom | tr -d ' '); echo "framing fuzz: $(FRAMING_CASES) cases per parser, seed $$seed"; \
	MRTR_STATE_TEST_FRAMING_CASES=$(FRAMING_CASES) MRTR_STATE_TEST_FRAMING_SEED=$$seed \
		$(BIN)/python -m pytest -q -p no:cacheprovider tests/test_proxy_framing.py -k fuzzer

lock: $(STAMP) ## Re-pin the container images' requirements (deploy/*/*-requirements.txt, with digests)
	$(BIN)/python scripts/lock_images.py

clean: ## Remove the virtual environment and caches (keys/ is left alone)
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis build dist *.egg-info
