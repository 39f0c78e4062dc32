"""Shared fixtures: a small procedure library copied into a temporary folder per test, as a suite.

The fixture suite is named ``golden``: ``<tmp>/suites/golden.yaml`` points at
``<tmp>/library/golden.jsonl`` (a golden set named ``library``, after its folder) and the
snapshots under ``<tmp>/library``.
"""

import shutil
from pathlib import Path

import dagster as dg
import pytest

from rag_eval_pipeline.defs.resources import ReferenceSystemResource
from rag_eval_pipeline.testing import (
    evaluation_assets,
    evaluation_resources,
    materialize_suite,
    write_suite_file,
)

FIXTURES = Path(__file__).parent / "fixtures"
NIGHT = "2026-10-15"
SUITE = "golden"
FIXTURE_GATES = FIXTURES / "gates.yaml"


def fixture_assets() -> list:
    """The nightly graph and run_comparison with the fixture's gates."""
    return evaluation_assets(FIXTURE_GATES)


@pytest.fixture
def library(tmp_path: Path) -> Path:
    """A writable copy of the fixture library: ``<tmp>/library/2026-10-01`` and ``golden.jsonl``."""
    target = tmp_path / "library"
    shutil.copytree(FIXTURES / "library", target)
    return target


def fixture_suites(library: Path, *, human_labels=None, trace_store=None) -> Path:
    """The suite registry folder beside the library, holding the fixture suite."""
    registry = library.parent / "suites"
    write_suite_file(
        registry,
        SUITE,
        golden_set=library / "golden.jsonl",
        corpus_root=library,
        human_labels=human_labels or None,
        trace_store=trace_store or None,
    )
    return registry


def fixture_resources(
    library: Path, warehouse_path: Path, judge=None, system=None, **settings
) -> dict:
    """Resources pointing at the fixture suite, with a threshold that suits its tiny corpus."""
    registry = fixture_suites(
        library,
        human_labels=settings.pop("human_labels", None),
        trace_store=settings.pop("trace_store", None),
    )
    return evaluation_resources(
        suites=registry,
        warehouse=warehouse_path,
        system=system or ReferenceSystemResource(evidence_threshold=1.0),
        judge=judge,
        **settings,
    )


def materialize_night(
    library: Path, warehouse_path: Path, night: str = NIGHT, judge=None, instance=None, **settings
):
    """Materialize the whole graph of the fixture suite for one night into ``warehouse_path``."""
    return materialize_suite(
        night,
        SUITE,
        fixture_resources(library, warehouse_path, judge, **settings),
        instance=instance,
        assets=fixture_assets(),
    )


# A gate no night passes: Recall@1 of at least 1.01.
IMPOSSIBLE_GATE = (
    "version: 1\ngates:\n  - name: impossible_recall\n    table: retrieval_metrics\n"
    "    metric: R@1\n    statistic: value\n    op: '>='\n    threshold: 1.01\n"
)


def failing_gate_night(library: Path, tmp_path: Path):
    """The fixture night under ``IMPOSSIBLE_GATE``, into ``<tmp>/w.duckdb`` on an ephemeral
    instance: ``(result, instance, warehouse)``; the run is published, then fails its gate."""
    gates = tmp_path / "gates.yaml"
    gates.write_text(IMPOSSIBLE_GATE)
    warehouse = tmp_path / "w.duckdb"
    instance = dg.DagsterInstance.ephemeral()
    result = materialize_suite(
        NIGHT,
        SUITE,
        fixture_resources(library, warehouse),
        instance=instance,
        assets=evaluation_assets(gates),
    )
    return result, instance, warehouse
