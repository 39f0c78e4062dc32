"""Shared fixtures: a small procedure library copied into a temporary folder per test."""

import shutil
from pathlib import Path

import dagster as dg
import pytest

from rag_eval_pipeline.definitions import ASSETS
from rag_eval_pipeline.defs.resources import (
    DeterministicJudgeResource,
    EvalSettings,
    ReferenceSystemResource,
    WarehouseResource,
)

FIXTURES = Path(__file__).parent / "fixtures"
NIGHT = "2026-10-15"


@pytest.fixture
def library(tmp_path: Path) -> Path:
    """A writable copy of the fixture library: ``<tmp>/library/2026-10-01`` and ``golden.jsonl``."""
    target = tmp_path / "library"
    shutil.copytree(FIXTURES / "library", target)
    return target


def fixture_resources(library: Path, warehouse_path: Path, judge=None, **settings) -> dict:
    """Resources pointing at the fixture library, with a threshold that suits its tiny corpus."""
    return {
        "settings": EvalSettings(
            corpus_root=str(library),
            golden_set=str(library / "golden.jsonl"),
            human_labels=settings.pop("human_labels", ""),
            **settings,
        ),
        "system": ReferenceSystemResource(evidence_threshold=1.0),
        "judge": judge or DeterministicJudgeResource(),
        "warehouse_db": WarehouseResource(path=str(warehouse_path)),
    }


def materialize_night(
    library: Path, warehouse_path: Path, night: str = NIGHT, judge=None, **settings
):
    """Materialize the whole graph for one night into ``warehouse_path``."""
    return dg.materialize(
        ASSETS,
        resources=fixture_resources(library, warehouse_path, judge, **settings),
        partition_key=night,
        instance=dg.DagsterInstance.ephemeral(),
        raise_on_error=False,
    )
