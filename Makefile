# The two commands: `make nightly` and `make test`. Both set up everything on first use:
# a pinned uv in .tools/, then the environment from uv.lock in .venv/ (reused afterwards).
SHELL := /bin/bash
PYTHON ?= python3
UV_VERSION := 0.13.9
UV := .tools/bin/uv
VENV := .venv
export DAGSTER_HOME := $(CURDIR)/.dagster_home
export RAG_EVAL_TIMEZONE ?= UTC
UI_PORT ?= 3000

.PHONY: install nightly test lint format ui daemon validate bench clean

$(UV):
	$(PYTHON) -m venv .tools
	.tools/bin/pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

# Bytecode is compiled at install: a process that cannot write it (PYTHONDONTWRITEBYTECODE, a
# read-only image) would otherwise compile dagster from source at every start, about 3 s.
$(VENV)/.synced: $(UV) pyproject.toml uv.lock Makefile
	$(UV) sync --frozen --all-groups --quiet --compile-bytecode
	touch $@

$(DAGSTER_HOME)/dagster.yaml: dagster.yaml
	mkdir -p $(DAGSTER_HOME)
	cp dagster.yaml $@

install: $(VENV)/.synced $(DAGSTER_HOME)/dagster.yaml

nightly: install
	$(VENV)/bin/rag-eval nightly $(if $(SUITE),--suite $(SUITE)) $(if $(PARTITION),--partition $(PARTITION))

test: install
	$(VENV)/bin/pytest

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: install
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

validate: install
	$(VENV)/bin/dagster definitions validate -w workspace.yaml

ui: install
	$(VENV)/bin/dagster-webserver -w workspace.yaml -h 127.0.0.1 -p $(UI_PORT)

# The schedule and the sensors (comparison guard, abandoned runs, failure alerts) run only under
# the daemon: run it beside `make ui`, as the platform team does (docs/OPERATIONS.md).
daemon: install
	$(VENV)/bin/dagster-daemon run -w workspace.yaml

bench: install
	$(VENV)/bin/python bench/bench_nightly.py

clean:
	rm -rf warehouse $(DAGSTER_HOME)
