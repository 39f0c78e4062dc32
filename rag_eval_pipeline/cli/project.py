"""What every command needs to know about the project: its deployment, warehouse and instance."""

import argparse
import datetime as dt
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rag_eval_pipeline.lib.deployment import Deployment
from rag_eval_pipeline.lib.errors import ConfigError
from rag_eval_pipeline.lib.paths import packaged_path, project_path, project_root

if TYPE_CHECKING:
    # Polars and DuckDB load when a command needs them: importing the command line loads
    # neither, so a command can choose their settings first (``evaluate-run`` does).
    from rag_eval_pipeline.lib.store.warehouse import Warehouse

INSTANCE_SETTINGS = "dagster.yaml"


def deployment() -> Deployment:
    return Deployment.from_environment(os.environ)


def warehouse() -> "Warehouse":
    """The deployment's warehouse, refused (``RAG_EVAL_WAREHOUSE`` and the path named) where no
    warehouse can be: under a file, or an existing file that is not a DuckDB database."""
    from rag_eval_pipeline.lib.store.warehouse import Warehouse, location_problem

    path = project_path(deployment().warehouse)
    problem = location_problem(path)
    if problem:
        raise ConfigError(f"RAG_EVAL_WAREHOUSE {path}: {problem}")
    return Warehouse(path)


def warehouse_resource():
    """The deployment's warehouse and run store, as the definitions see them."""
    from rag_eval_pipeline.defs.resources import WarehouseResource

    chosen = deployment()
    return WarehouseResource(path=chosen.warehouse, store=chosen.run_store)


def existing_warehouse() -> "Warehouse":
    """The published warehouse, which must exist already."""
    found = warehouse()
    if not found.exists():
        raise ConfigError(f"{found.path}: no warehouse yet; run 'make nightly' first")
    return found


def regression_alpha() -> float:
    """The significance level of the regression gate (``no_significant_regression``) in the
    deployment's gates file, the one the comparison guard checks comparisons with."""
    from rag_eval_pipeline.lib.runs.gates import read_gates

    return read_gates(deployment().gates_file).regression_alpha


def regression_alpha_or_none(what: str) -> float | None:
    """``regression_alpha()``, or None with a warning on stderr when the gates file cannot be
    read: ``what`` is then shown without its worse or better marks, and nothing else fails."""
    try:
        return regression_alpha()
    except ConfigError as error:
        print(f"warning: {error}; {what} without worse or better marks", file=sys.stderr)
        return None


def dagster_home() -> Path:
    """The project's persistent Dagster instance: ``DAGSTER_HOME``, else ``.dagster_home`` in the
    project folder (created with the project's instance settings), so every CLI run is recorded
    where ``make ui`` shows it."""
    configured = os.environ.get("DAGSTER_HOME")
    home = Path(configured) if configured else project_root() / ".dagster_home"
    home.mkdir(parents=True, exist_ok=True)
    settings = home / INSTANCE_SETTINGS
    if not settings.exists():
        source = packaged_path(INSTANCE_SETTINGS)
        settings.write_text(source.read_text(encoding="utf-8") if source.is_file() else "")
    os.environ["DAGSTER_HOME"] = str(home)
    return home


def night(value: str) -> str:
    """An argparse type: a night as ``YYYY-MM-DD``."""
    try:
        return dt.date.fromisoformat(value).isoformat()
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a date (YYYY-MM-DD)") from None
