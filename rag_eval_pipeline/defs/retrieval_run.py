"""The retrieval run asset: the run's record is written, then the system retrieves, shard by shard.

For a live system this is where the calls are made: ``system_calls`` records what each came to,
each shard's capture part is merged into the run's trace file (recorded on the run), and the
blocking check ``system_errors_within_bound`` fails the run, with the counts and causes, when too
many items ended in a system error.
"""

import dagster as dg
import polars as pl

from rag_eval_pipeline.defs.metadata import rebaseline_for, run_link, table_metadata
from rag_eval_pipeline.defs.partitions import night_and_suite, nightly_check
from rag_eval_pipeline.defs.resources import (
    EvalSettings,
    JudgeResource,
    ShardingResource,
    SuiteRegistryResource,
    SystemResource,
    WarehouseResource,
)
from rag_eval_pipeline.defs.sharding import fan_in, fan_out, shard_inputs, sharded_asset, spec_of
from rag_eval_pipeline.lib.inputs.corpus import snapshot_names
from rag_eval_pipeline.lib.runs.gates import GateSet, check_cutoffs
from rag_eval_pipeline.lib.runs.lifecycle import begin_run, note_capture
from rag_eval_pipeline.lib.runs.record import EVAL_RUN_TAG, EvalRunRecord, RunRequest, handed_on
from rag_eval_pipeline.lib.systems.calls import SystemErrorBoundError, error_bound
from rag_eval_pipeline.lib.systems.capture import merge_captures
from rag_eval_pipeline.lib.systems.http import CorpusMismatch
from rag_eval_pipeline.lib.systems.run import captured_traces, retrieval_results, system_calls

ERROR_BOUND_CHECK = "system_errors_within_bound"
TABLES = ("retrieval_results", "system_calls")


def run_handle(record: EvalRunRecord, dagster_run_id: str) -> dict:
    """What the run's assets hand each other: the record (the data is in the run store)."""
    return {
        "eval_run_id": record.eval_run_id,
        "record": record.as_json(),
        "dagster_run_id": dagster_run_id,
    }


def record_of(handle: dict) -> EvalRunRecord:
    """The record an upstream step handed on (refused when begun with other measure
    definitions, ``record.handed_on``)."""
    return handed_on(handle["record"])


def build_plan_retrieval(gates: GateSet) -> dg.OpDefinition:
    """The op that begins the run (``plan_retrieval``), refusing first a gate of ``gates`` at a
    cut-off the run's settings do not compute (``gates.check_cutoffs``): ``rag-eval nightly``
    refuses it before the night starts, and a night the daemon or the UI launched fails here,
    before the system is asked anything, instead of reporting the gate "not assessed" every
    night."""

    @dg.op(name="plan_retrieval", out=dg.DynamicOut(dict))
    def plan_retrieval(
        context: dg.OpExecutionContext,
        corpus_snapshot: dict,
        golden_set: dict,
        settings: EvalSettings,
        suites: SuiteRegistryResource,
        system: SystemResource,
        judge: JudgeResource,
        warehouse_db: WarehouseResource,
        sharding: ShardingResource,
    ):
        """Begin the run: its record (suite, night, digests, system and judge configurations,
        every setting that can change a figure) gives the ``eval_run_id`` and goes to the run
        store before the system is asked anything; then one output per shard. Input of the
        system's own (a replayed trace file) that does not fit the night, and a gate the run
        cannot assess, are refused before the run begins."""
        night, suite_name = night_and_suite(context)
        suite = suites.suite(suite_name)
        run_settings = settings.run_settings(suite)
        check_cutoffs(gates, run_settings.cutoffs)
        store = warehouse_db.run_store()
        system.check_inputs(
            corpus_snapshot["corpus_digest"],
            store.read_table(store.golden_dir(golden_set["golden_digest"]), "golden_items"),
            str(suite.golden_set),
        )
        record = EvalRunRecord(
            suite=suite_name,
            night=night,
            snapshot_id=corpus_snapshot["snapshot_id"],
            corpus_digest=corpus_snapshot["corpus_digest"],
            golden_set=golden_set["golden_set"],
            golden_digest=golden_set["golden_digest"],
            system_config=system.config(),
            judge_config=judge.config(),
            settings=run_settings,
            request=RunRequest.from_tags(context.run.tags),
        )
        context.instance.add_run_tags(context.run_id, {EVAL_RUN_TAG: record.eval_run_id})
        for table in TABLES:
            store.remove_table(store.run_dir(record.eval_run_id), table)
        begin_run(store, record, context.run_id)
        yield from fan_out(record, sharding.count())

    return plan_retrieval


@dg.op
def retrieve_shard(
    context: dg.OpExecutionContext,
    shard: dict,
    system: SystemResource,
    suites: SuiteRegistryResource,
    warehouse_db: WarehouseResource,
) -> dict:
    """Top-k passages for the shard's golden questions, and what each call came to. A live
    service on another corpus state fails the step naming the snapshot folder of each digest."""
    spec, record = spec_of(shard)
    store = warehouse_db.run_store()
    run_dir = store.run_dir(record.eval_run_id)
    passages, mine = shard_inputs(store, spec, record)
    the_system = system.build(
        passages,
        warehouse_db.capture_path(record.eval_run_id, spec.part),
        cache=store.cache_dir("systems"),
    )
    run_id = pl.lit(record.eval_run_id).alias("eval_run_id")
    try:
        results = retrieval_results(the_system, mine, passages, record.settings.retrieval_depth)
    except CorpusMismatch as error:
        folders = snapshot_names(suites.suite(record.suite).corpus_root)
        raise error.naming_snapshots(folders) from None
    store.write_table(run_dir, "retrieval_results", results.with_columns(run_id), spec.part)
    calls = system_calls(the_system, mine).with_columns(run_id)
    store.write_table(run_dir, "system_calls", calls, spec.part)
    captured = captured_traces(the_system)
    return {**shard, "capture": str(captured) if captured else None}


@dg.op(out={"result": dg.Out(), ERROR_BOUND_CHECK: dg.Out(is_required=False)})
def finish_retrieval(
    context: dg.OpExecutionContext,
    shards: list[dict],
    system: SystemResource,
    warehouse_db: WarehouseResource,
):
    """Every shard's rows are there; the captures are merged into the run's trace file; the
    error-share check passes or fails the run with the counts."""
    store = warehouse_db.run_store()
    record = fan_in(store, shards, TABLES)
    run_dir = store.run_dir(record.eval_run_id)
    results = store.read_table(run_dir, "retrieval_results")
    calls = store.read_table(run_dir, "system_calls")
    capture, capture_digest = merged_capture(store, warehouse_db, record, shards)
    bound = error_bound(calls, system.max_system_error_share())
    yield dg.Output(
        run_handle(record, context.run_id),
        output_name="result",
        metadata={
            **table_metadata(results, "retrieval_results"),
            **record_metadata(record, context.run_id),
            "shards": len(shards),
            "items_without_results": calls.height - results["item_id"].n_unique(),
            "system_errors": bound.errors,
            "system_errors_by_cause": dg.MetadataValue.json(bound.by_cause),
            "trace_file": str(capture or ""),
            "trace_digest": capture_digest,
        },
    )
    yield error_bound_check(bound)
    if not bound.passed:
        # The check blocks the graph; failing the step too puts the counts in the run's failure
        # (the evaluation run is marked failed with this message).
        where = f"; the capture is {capture}" if capture else ""
        raise SystemErrorBoundError(bound.message + where)


def merged_capture(store, warehouse_db: WarehouseResource, record, shards: list[dict]):
    """The shards' captures merged into the run's trace file in golden-set order, noted in the
    run's record: (path, digest), or (None, "") for a system that captures nothing."""
    parts = [shard["capture"] for shard in shards if shard["capture"]]
    if not parts:
        return None, ""
    items = store.read_table(store.golden_dir(record.golden_digest), "golden_items")
    capture, capture_digest = merge_captures(
        parts, warehouse_db.capture_path(record.eval_run_id), items.sort("line")["item_id"]
    )
    note_capture(store, record.eval_run_id, str(capture), capture_digest)
    return capture, capture_digest


def record_metadata(record, dagster_run_id: str) -> dict:
    """What the UI shows of the run's identity: its id, run, suite, digests and settings."""
    return {
        "eval_run_id": record.eval_run_id,
        "dagster_run": run_link(dagster_run_id),
        "suite": record.suite,
        "corpus_digest": record.corpus_digest,
        "golden_digest": record.golden_digest,
        "system_id": record.system_id,
        "system_config": dg.MetadataValue.json(dict(record.system_config)),
        "system_config_digest": record.system_config_digest,
        "judge_id": record.judge_id,
        "judge_config": dg.MetadataValue.json(dict(record.judge_config)),
        "judge_config_digest": record.judge_config_digest,
        "settings": dg.MetadataValue.json(record.settings.as_dict()),
        "settings_digest": record.settings.digest,
        **rebaseline_for(record),
    }


def error_bound_check(bound) -> dg.AssetCheckResult:
    """The system error bound as the blocking check of ``retrieval_run``."""
    return dg.AssetCheckResult(
        asset_key="retrieval_run",
        check_name=ERROR_BOUND_CHECK,
        passed=bound.passed,
        severity=dg.AssetCheckSeverity.ERROR,
        description=bound.message,
        metadata={
            "message": bound.message,
            "items": bound.items,
            "system_errors": bound.errors,
            "max_error_share": bound.max_share,
            "by_cause": dg.MetadataValue.json(bound.by_cause),
        },
    )


def build_retrieval_run(partitions: dg.PartitionsDefinition, gates: GateSet) -> dg.AssetsDefinition:
    plan_retrieval = build_plan_retrieval(gates)

    @sharded_asset(
        "retrieval_run",
        partitions=partitions,
        group="system_runs",
        kinds={"parquet", "bm25"},
        code_version="retrieval-v4",
        description=(
            "Top-k passages for every golden question from the system under test, shard by "
            "shard. Starts the evaluation run (its record, with status started, goes to the run "
            "store before the system is asked anything). Results go to retrieval_results with "
            "each passage's version status, and what each call came to to system_calls."
        ),
        check_specs=[
            nightly_check(
                ERROR_BOUND_CHECK,
                asset="retrieval_run",
                partitions=partitions,
                blocking=True,
                description="At most the system's bound (2% by default) of the items ended in a "
                "system error (a failed call: neither a refusal nor an answer).",
            )
        ],
    )
    def retrieval_run(corpus_snapshot, golden_set):
        shards = plan_retrieval(corpus_snapshot, golden_set).map(retrieve_shard).collect()
        result, bound = finish_retrieval(shards)
        return {"retrieval_run": result, f"retrieval_run_{ERROR_BOUND_CHECK}": bound}

    return retrieval_run
