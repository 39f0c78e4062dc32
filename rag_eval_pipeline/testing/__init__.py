"""Test doubles and helpers shared by the tests and the benchmarks.

- ``fake_openai``: an OpenAI-compatible chat endpoint on 127.0.0.1 with scripted faults;
- ``engine``, ``postgres``: Redis with Celery workers, and PostgreSQL, as processes stopped by pid;
- ``warehouses``, ``timeline``: two warehouses compared row by row; where a run's time went;
- ``flaky``: a nightly job whose retrieval fails in one shard, for re-execution;
- ``write_suite_file``, ``evaluation_resources``, ``materialize_suite``: the real evaluation graph
  on a suite given by its paths, into a warehouse of the caller's choosing.
"""

from pathlib import Path

import dagster as dg

from rag_eval_pipeline.defs import build_evaluation_assets, build_evaluation_checks
from rag_eval_pipeline.defs.comparison import build_run_comparison
from rag_eval_pipeline.defs.partitions import SUITE, nightly_partitions, partition_key
from rag_eval_pipeline.defs.resources import (
    DeterministicJudgeResource,
    EvalSettings,
    ReferenceSystemResource,
    ShardingResource,
    SuiteRegistryResource,
    WarehouseResource,
)
from rag_eval_pipeline.lib.inputs.suites import Suite, write_suite
from rag_eval_pipeline.lib.paths import packaged_path
from rag_eval_pipeline.lib.runs.gates import read_gates

DEFAULT_GATES = packaged_path("gates/release_gates.yaml")


def write_suite_file(
    registry: Path,
    name: str,
    *,
    golden_set: Path,
    corpus_root: Path,
    snapshot: str = "auto",
    human_labels: Path | None = None,
    trace_store: Path | None = None,
) -> Path:
    """A suite file ``<registry>/<name>.yaml`` for the given paths."""
    return write_suite(
        registry,
        Suite(
            name=name,
            golden_set=Path(golden_set),
            corpus_root=Path(corpus_root),
            snapshot=snapshot,
            human_labels=Path(human_labels) if human_labels else None,
            trace_store=Path(trace_store) if trace_store else None,
        ),
    )


def evaluation_resources(
    *,
    suites: Path,
    warehouse: Path,
    system=None,
    judge=None,
    store: str = "",
    shards: int = 1,
    **settings,
) -> dict:
    """Resources for the evaluation graph: a suite registry folder, a warehouse file, and the
    reference system and deterministic judge unless others are given."""
    return {
        "sharding": ShardingResource(shards=shards),
        "settings": EvalSettings(**settings),
        "suites": SuiteRegistryResource(path=str(suites)),
        "system": system or ReferenceSystemResource(),
        "judge": judge or DeterministicJudgeResource(),
        "warehouse_db": WarehouseResource(path=str(warehouse), store=store),
    }


def evaluation_assets(gates_file: Path = DEFAULT_GATES, *, timezone: str = "UTC") -> list:
    """The nightly graph, its release checks and ``run_comparison``, with the gates of
    ``gates_file``."""
    partitions = nightly_partitions(timezone)
    gates = read_gates(gates_file)
    return [
        *build_evaluation_assets(partitions, gates),
        *build_evaluation_checks(partitions, gates),
        build_run_comparison(partitions, gates),
    ]


def names(definition: dg.AssetsDefinition) -> set[str]:
    """The asset names a definition materializes (none for a checks-only definition)."""
    return {key.path[-1] for key in definition.keys}


def materialize_suite(
    night: str,
    suite: str,
    resources: dict,
    *,
    instance: dg.DagsterInstance | None = None,
    assets: list | None = None,
    selection=None,
    tags: dict | None = None,
    run_config: dict | None = None,
    raise_on_error: bool = False,
) -> dg.ExecuteInProcessResult:
    """Materialize the nightly graph (or ``selection`` of it) for one night and suite."""
    instance = instance or dg.DagsterInstance.ephemeral()
    if suite not in instance.get_dynamic_partitions(SUITE):
        instance.add_dynamic_partitions(SUITE, [suite])
    every = assets or evaluation_assets()
    return dg.materialize(
        every,
        selection=selection or [a for a in every if "run_comparison" not in names(a)],
        resources=resources,
        partition_key=partition_key(night, suite),
        instance=instance,
        tags=tags or {},
        run_config=run_config or {},
        raise_on_error=raise_on_error,
    )
