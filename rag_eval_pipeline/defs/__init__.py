"""Dagster objects of the code location, built from a ``Deployment`` by ``build_definitions``."""

from collections.abc import Mapping

import dagster as dg

from rag_eval_pipeline.defs.alerts import failure_alerts
from rag_eval_pipeline.defs.claim_diagnostics import build_claim_diagnostics
from rag_eval_pipeline.defs.comparison import build_run_comparison
from rag_eval_pipeline.defs.corpus_snapshot import build_corpus_snapshot
from rag_eval_pipeline.defs.eval_summary import build_eval_summary
from rag_eval_pipeline.defs.generation_run import build_generation_run
from rag_eval_pipeline.defs.golden_set import build_golden_set
from rag_eval_pipeline.defs.jobs import build_jobs
from rag_eval_pipeline.defs.judge_sample import build_judge_sample
from rag_eval_pipeline.defs.metric_tables import (
    build_generation_metrics,
    build_judge_calibration,
    build_retrieval_metrics,
)
from rag_eval_pipeline.defs.partitions import nightly_partitions
from rag_eval_pipeline.defs.progress import LOGGERS
from rag_eval_pipeline.defs.release_checks import build_release_checks
from rag_eval_pipeline.defs.resources import (
    DeterministicJudgeResource,
    EvalSettings,
    HttpSystemResource,
    LLMJudgeResource,
    ReferenceSystemResource,
    ReplaySystemResource,
    RunStoreIOManager,
    ShardingResource,
    SuiteRegistryResource,
    WarehouseResource,
)
from rag_eval_pipeline.defs.retrieval_run import build_retrieval_run
from rag_eval_pipeline.defs.schedules import build_nightly_schedule
from rag_eval_pipeline.defs.sensors import abandoned_runs, build_comparison_guard
from rag_eval_pipeline.lib.deployment import Deployment
from rag_eval_pipeline.lib.runs.gates import GateSet, read_gates


def build_evaluation_assets(
    partitions: dg.PartitionsDefinition,
    gates: GateSet,
    writer_tags: Mapping[str, str] | None = None,
) -> list[dg.AssetsDefinition]:
    """The nightly graph: inputs, system runs, judging, metric tables, summary (the one step
    that writes the warehouse, with ``writer_tags``: ``Deployment.warehouse_writer_tags``).
    Its release checks come from ``build_evaluation_checks``."""
    return [
        build_corpus_snapshot(partitions),
        build_golden_set(partitions),
        build_retrieval_run(partitions, gates),
        build_generation_run(partitions),
        build_judge_sample(partitions),
        build_retrieval_metrics(partitions),
        build_generation_metrics(partitions),
        build_judge_calibration(partitions),
        build_claim_diagnostics(partitions),
        build_eval_summary(partitions, gates, writer_tags),
    ]


def build_evaluation_checks(
    partitions: dg.PartitionsDefinition,
    gates: GateSet,
    writer_tags: Mapping[str, str] | None = None,
) -> list[dg.AssetChecksDefinition]:
    """The step after the summary: ``published`` on every metric table, and the release gates,
    each evaluated per partition (it reads the warehouse, so it runs where the summary does:
    ``writer_tags``)."""
    return [build_release_checks(partitions, gates, writer_tags)]


def build_resources(deployment: Deployment) -> dict:
    """The offline defaults (bundled suites, the reference system, the deterministic judge),
    with the real integrations the deployment chooses."""
    systems = {
        "replay": lambda: ReplaySystemResource(path=deployment.traces),
        "http": lambda: HttpSystemResource(
            base_url=deployment.system_url, api_key_env=deployment.system_key_env
        ),
    }
    system = systems.get(deployment.system, ReferenceSystemResource)()
    judge = (
        LLMJudgeResource(
            base_url=deployment.judge_base_url,
            model=deployment.judge_model,
            api_key_env=deployment.judge_key_env,
        )
        if deployment.judge == "llm"
        else DeterministicJudgeResource()
    )
    io_store = deployment.io_store
    hand_offs = {"io_manager": RunStoreIOManager(base=io_store)} if io_store else {}
    return {
        **hand_offs,
        "settings": EvalSettings(),
        "suites": SuiteRegistryResource(path=deployment.suites),
        "system": system,
        "judge": judge,
        "warehouse_db": WarehouseResource(path=deployment.warehouse, store=deployment.run_store),
        "sharding": ShardingResource(shards=deployment.shards),
    }


def build_definitions(
    deployment: Deployment, resources: Mapping[str, object] | None = None
) -> dg.Definitions:
    """Every asset, check, job, schedule, sensor and resource of the code location."""
    partitions = nightly_partitions(deployment.timezone, deployment.first_night)
    gates = read_gates(deployment.gates_file)
    nightly_eval, rebaseline, run_comparison_job = build_jobs(partitions, deployment)
    writer_tags = deployment.warehouse_writer_tags
    return dg.Definitions(
        assets=[
            *build_evaluation_assets(partitions, gates, writer_tags),
            build_run_comparison(partitions, gates),
        ],
        asset_checks=build_evaluation_checks(partitions, gates, writer_tags),
        jobs=[nightly_eval, rebaseline, run_comparison_job],
        schedules=[build_nightly_schedule(nightly_eval, deployment.timezone, deployment.suites)],
        sensors=[
            build_comparison_guard([run_comparison_job, rebaseline]),
            abandoned_runs,
            failure_alerts,
        ],
        resources=dict(resources) if resources is not None else build_resources(deployment),
        loggers=LOGGERS,
    )
