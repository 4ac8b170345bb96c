# wheelsmith developer and user entry points. Each target does its own set-up.
#   make demo   build causal-conv1d for sm_120, verify it, install it in a scratch venv, import it
#   make test   lint, type-check and run the tests (including real nvcc builds)

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
WS := $(BIN)/wheelsmith

.PHONY: demo test lint docs typecheck unit fuzz test-slow test-gpu test-transformers bench schema support-table clean

$(BIN)/.installed: pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "wheelsmith needs Python >= 3.10")'
	@$(PYTHON) -c 'import ensurepip, venv' 2>/dev/null || { \
	  echo "error: $(PYTHON) cannot create virtual environments"; \
	  echo "hint: on Debian/Ubuntu run: sudo apt install python3-venv"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

demo: $(BIN)/.installed
	mkdir -p build
	WHEELSMITH=$(WS) PYTHON=$(PYTHON) scripts/demo.sh

# The workflows: actionlint (with the pinned shellcheck for run: scripts; pyflakes off: no
# Python steps) and zizmor at its strictest persona, offline. Settings and waivers, with
# reasons: .github/actionlint.yaml, .github/zizmor.yml.
# The documentation site (mkdocs.yml): --strict fails on a broken link or anchor, a missing page
# or a page left out of the nav; nothing is fetched (no web fonts, no plugin that downloads).
lint: $(BIN)/.installed
	$(BIN)/ruff check src tests bench scripts setup.py
	$(BIN)/actionlint -config-file .github/actionlint.yaml -shellcheck $(BIN)/shellcheck -pyflakes ""
	$(BIN)/zizmor --quiet --offline --persona auditor --strict-collection --config .github/zizmor.yml .
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# The CLI reference (docs/cli-options.md) generated from the CLI itself, then the site, into
# build/site/ (tests/test_docs_cli.py fails while the committed reference is stale).
docs: $(BIN)/.installed
	$(BIN)/python scripts/cli_reference.py > docs/cli-options.md.tmp && mv docs/cli-options.md.tmp docs/cli-options.md
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

typecheck: $(BIN)/.installed
	$(BIN)/mypy

test: lint typecheck
	$(BIN)/pytest -m "not slow" --durations=25

unit: $(BIN)/.installed
	$(BIN)/pytest -m "not toolchain and not build and not slow"

# The trust harness's soak: every generated-input property of tests/trust/ with many more
# cases than make test's fixed budget (FUZZ_EXAMPLES per property, random each run).
fuzz: $(BIN)/.installed
	HYPOTHESIS_PROFILE=fuzz $(BIN)/pytest tests/trust -m "not slow" --hypothesis-show-statistics

test-slow: $(BIN)/.installed
	$(BIN)/python -m pip install --quiet -e '.[dev,slow]'
	$(BIN)/pytest -m slow

test-gpu: $(BIN)/.installed
	$(BIN)/pytest -m gpu

# doctor's model view against every transformers minor from the oldest it supports to the newest
# on the package index, each with the fla pip resolves beside it (CPU only; about 1 GB of
# downloads, cached per machine).
test-transformers: $(BIN)/.installed
	$(BIN)/pytest -m transformers

bench: $(BIN)/.installed
	$(BIN)/python bench/index_publish.py
	$(BIN)/python bench/index_check.py
	$(BIN)/python bench/nightly_cache.py
	$(BIN)/python bench/build_speed.py

schema: $(BIN)/.installed
	$(WS) schema > recipes/recipe.schema.json

# The README's support table, from the reports under docs/evidence/reports/ (nightly.json files
# and the evidence reports of runs outside nightly; tests/fleet/test_support.py fails while the
# committed table is stale).
support-table: $(BIN)/.installed
	$(WS) support-table docs/evidence/reports --readme README.md

clean:
	rm -rf build wheelhouse .pytest_cache .mypy_cache .ruff_cache
