"""The generation run asset: guarded answers with cited passage ids, shard by shard."""

import dagster as dg
import polars as pl

from rag_eval_pipeline.defs.metadata import counts, table_metadata
from rag_eval_pipeline.defs.partitions import nightly_check
from rag_eval_pipeline.defs.resources import ShardingResource, SystemResource, WarehouseResource
from rag_eval_pipeline.defs.retrieval_run import record_of, run_handle
from rag_eval_pipeline.defs.sharding import fan_in, fan_out, shard_inputs, sharded_asset, spec_of
from rag_eval_pipeline.lib.errors import named_few
from rag_eval_pipeline.lib.runs.lifecycle import noted_capture
from rag_eval_pipeline.lib.systems.run import generation_results

CITATION_CHECK = "answers_cite_retrieved_passages"
TABLES = ("generation_results",)


@dg.op(out=dg.DynamicOut(dict))
def plan_generation(
    retrieval_run: dict, warehouse_db: WarehouseResource, sharding: ShardingResource
):
    """One output per shard of the run."""
    record = record_of(retrieval_run)
    store = warehouse_db.run_store()
    store.remove_table(store.run_dir(record.eval_run_id), "generation_results")
    yield from fan_out(record, sharding.count())


@dg.op
def generate_shard(shard: dict, system: SystemResource, warehouse_db: WarehouseResource) -> dict:
    """The answers (or refusals) to the shard's golden questions, given their retrieval. A live
    system's answers are read from the capture the retrieval step wrote and noted on the run."""
    spec, record = spec_of(shard)
    store = warehouse_db.run_store()
    run_dir = store.run_dir(record.eval_run_id)
    passages, mine = shard_inputs(store, spec, record)
    retrieved = store.read_table(run_dir, "retrieval_results").join(
        mine.select("item_id"), on="item_id", how="semi"
    )
    capture = noted_capture(store, record.eval_run_id)
    the_system = system.build(passages, capture or warehouse_db.capture_path(record.eval_run_id))
    results = generation_results(the_system, mine, retrieved, record.settings.context_k)
    store.write_table(
        run_dir,
        "generation_results",
        results.with_columns(eval_run_id=pl.lit(record.eval_run_id)),
        spec.part,
    )
    return shard


@dg.op(out={"result": dg.Out(), CITATION_CHECK: dg.Out(is_required=False)})
def finish_generation(
    context: dg.OpExecutionContext, shards: list[dict], warehouse_db: WarehouseResource
):
    """Every shard's answers are there; citation validity is checked over the run."""
    store = warehouse_db.run_store()
    record = fan_in(store, shards, TABLES)
    results = store.read_table(store.run_dir(record.eval_run_id), "generation_results")
    invalid = results.filter(~pl.col("refused") & ~pl.col("citation_valid"))
    yield dg.Output(
        run_handle(record, context.run_id),
        output_name="result",
        metadata={
            **table_metadata(results, "generation_results"),
            "eval_run_id": record.eval_run_id,
            "corpus_digest": record.corpus_digest,
            "golden_digest": record.golden_digest,
            "shards": len(shards),
            "answered": int((~results["refused"]).sum()),
            "refusals_by_reason": dg.MetadataValue.json(
                counts(results.filter(pl.col("refused")), "refusal_reason")
            ),
        },
    )
    yield dg.AssetCheckResult(
        asset_key="generation_run",
        check_name=CITATION_CHECK,
        passed=invalid.height == 0,
        severity=dg.AssetCheckSeverity.ERROR,
        description=invalid_citations_message(invalid, int((~results["refused"]).sum())),
        metadata={"answers_with_invalid_citations": invalid.height},
    )


def invalid_citations_message(invalid: pl.DataFrame, answered: int) -> str:
    """What the citation check found: how many answers cite ids outside the context sent (or
    none), and the first five of their items."""
    if not invalid.height:
        return f"all {answered} answers cite only ids of the context sent"
    items = invalid.sort("item_id")["item_id"].to_list()
    return (
        f"{invalid.height} of {answered} answers cite ids outside the context sent (or cite "
        f"nothing): {named_few(items)}"
    )


def build_generation_run(partitions: dg.PartitionsDefinition) -> dg.AssetsDefinition:
    @sharded_asset(
        "generation_run",
        partitions=partitions,
        group="system_runs",
        kinds={"parquet"},
        code_version="generation-v3",
        description=(
            "The system's answer (or refusal, with its reason) for every golden question, shard "
            "by shard. The context sent is the top context_k retrieved passages. Citation "
            "validity (every cited id among the ids in the context sent) is measured here, "
            "independently of the system's own citation check, so a system that skips the check "
            "is still caught."
        ),
        check_specs=[
            nightly_check(
                CITATION_CHECK,
                asset="generation_run",
                partitions=partitions,
                description="Every answer given cites only ids that were in the context sent.",
            )
        ],
    )
    def generation_run(retrieval_run):
        shards = plan_generation(retrieval_run).map(generate_shard).collect()
        result, citations = finish_generation(shards)
        return {"generation_run": result, f"generation_run_{CITATION_CHECK}": citations}

    return generation_run
