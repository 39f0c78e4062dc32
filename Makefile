# The two commands: `make nightly` and `make test`. Both set up everything on first use:
# a pinned uv in .tools/, then the environment from uv.lock in .venv/ (reused afterwards).
SHELL := /bin/bash
PYTHON ?= python3
UV_VERSION := 0.13.9
UV := .tools/bin/uv
VENV := .venv
# The Dagster instance: .dagster_home/ in the checkout, or the DAGSTER_HOME you set (its own
# dagster.yaml is kept; one is written only where there is none).
PROJECT_HOME := $(CURDIR)/.dagster_home
export DAGSTER_HOME ?= $(PROJECT_HOME)
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

$(PROJECT_HOME)/dagster.yaml: dagster.yaml
	mkdir -p $(PROJECT_HOME)
	cp dagster.yaml $@

.PHONY: dagster-home
dagster-home: $(if $(filter $(PROJECT_HOME),$(DAGSTER_HOME)),$(PROJECT_HOME)/dagster.yaml)
	@mkdir -p "$(DAGSTER_HOME)"
	@[ -f "$(DAGSTER_HOME)/dagster.yaml" ] || cp dagster.yaml "$(DAGSTER_HOME)/dagster.yaml"

install: $(VENV)/.synced dagster-home

nightly: install
	$(VENV)/bin/rag-eval nightly $(if $(SUITE),--suite $(SUITE)) $(if $(PARTITION),--partition $(PARTITION))

# The tests use the project's own instance (or ones of their own), never a DAGSTER_HOME you set.
test: $(VENV)/.synced $(PROJECT_HOME)/dagster.yaml
	DAGSTER_HOME=$(PROJECT_HOME) $(VENV)/bin/pytest

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
	rm -rf warehouse $(PROJECT_HOME)
