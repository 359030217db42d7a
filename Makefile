# Two commands set up and use attnlab on a fresh machine:
#   make run    create .venv, install attnlab, run the main job on built-in defaults
#   make test   create .venv, install attnlab with its test extras, run the test suite
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# torch==2.13.0 resolves to the local CPU wheel on CPU-only machines that ship it and to the
# CUDA build from PyPI elsewhere; a torch that is already installed in the venv is kept.
TORCH_SPEC ?= torch==2.13.0

.PHONY: run test lint docs install clean browser-deps wordnet compiler

$(BIN)/activate:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q "$(TORCH_SPEC)"

$(VENV)/.installed: $(BIN)/activate pyproject.toml
	$(BIN)/python -m pip install -q -e ".[test]"
	touch $@

install: $(VENV)/.installed wordnet compiler

# transformers 5 removed TransfoXLLMHeadModel; the Transformer-XL parity test (tests/models/test_transfo_xl.py) runs HF's
# 4.46.3 from this folder in a subprocess (with .venv's torch), beside the transformers 5 of the other tests.
XL_SITE := .venv-xl/site
$(XL_SITE)/.installed: $(BIN)/activate
	$(BIN)/python -m pip install -q --no-deps --target $(XL_SITE) "transformers==4.46.3" "huggingface_hub==0.26.5" \
		"tokenizers==0.20.3" requests urllib3 idna certifi charset_normalizer
	touch $@

run: install
	$(BIN)/attnlab pretrain

test: lint $(XL_SITE)/.installed browser-deps
	$(BIN)/python -m pytest -q

# Headless Chromium for the web page's tests (pytest -m browser): installed with apt-get where we are root and
# apt-get exists; elsewhere those tests skip and say why. Never fails the build.
browser-deps:
	@if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		(apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver) \
			>/dev/null 2>&1 || echo "make: could not install chromium; the browser tests will be skipped"; \
	else echo "make: no chromium/chromedriver and no apt-get as root; the browser tests will be skipped"; fi

# WordNet 3.0, the English knowledge graph of K-BERT (attnlab.knowledge.graph.load_wordnet reads its files under
# /usr/share/wordnet): Debian's wordnet-base, installed with apt-get where we are root and apt-get exists; elsewhere
# `--kg wordnet` is a clear error naming this target and its test skips. Never fails the build.
wordnet:
	@if [ -f /usr/share/wordnet/data.noun ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		(apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
			wordnet-base) >/dev/null 2>&1 || echo "make: could not install wordnet-base; WordNet tests will be skipped"; \
	else echo "make: no WordNet and no apt-get as root; WordNet tests will be skipped"; fi

# A C++ compiler for decoding's few-row product kernel (attnlab/accel/csrc/few_row_gemm.cpp, built on first use by
# attnlab.accel.few_row_gemm): Debian's g++, installed with apt-get where we are root and apt-get exists; without it
# generation uses PyTorch's products (slower) and says so once. Never fails the build.
compiler:
	@if command -v "$${CXX:-g++}" >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		(apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends g++) \
			>/dev/null 2>&1 || echo "make: could not install g++; generation will use PyTorch's products"; \
	else echo "make: no C++ compiler and no apt-get as root; generation will use PyTorch's products"; fi

# Lint: ruff (rules and format), the layers contract of pyproject.toml (import-linter), then the documentation
# site built with --strict (a broken link or a missing page fails).
lint: install
	$(BIN)/python -m ruff check attnlab tests benchmarks experiments
	$(BIN)/python -m ruff format --check attnlab tests benchmarks experiments
	$(BIN)/lint-imports
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir $$(mktemp -d)

# The documentation site at http://127.0.0.1:8000 (MkDocs, Material theme, the API reference from docstrings).
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

clean:
	rm -rf $(VENV)
