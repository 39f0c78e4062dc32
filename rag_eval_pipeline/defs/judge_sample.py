"""The judge sample asset: claims of sampled answers, judged against the context sent, by shard.

The sample is drawn once over every answered trace (seeded, stratified), before it is split, so
it is the sample an unsharded run judges; each shard judges the sampled traces of its items.
"""

import dagster as dg
import polars as pl

from rag_eval_pipeline.defs.metadata import counts, table_metadata
from rag_eval_pipeline.defs.resources import (
    JudgeResource,
    ShardingResource,
    SuiteRegistryResource,
    WarehouseResource,
)
from rag_eval_pipeline.defs.retrieval_run import record_of, run_handle
from rag_eval_pipeline.defs.sharding import fan_in, fan_out, sharded_asset, spec_of
from rag_eval_pipeline.lib.inputs.traces import load_traces
from rag_eval_pipeline.lib.judges.budget import usage_row
from rag_eval_pipeline.lib.judges.run import (
    PRODUCTION,
    answered_golden,
    check_trace_store,
    judge_candidates,
    judge_traces,
    passage_texts,
    sample_for_judging,
)
from rag_eval_pipeline.lib.runs.registry import utc_now
from rag_eval_pipeline.lib.runs.shards import items_of_shard
from rag_eval_pipeline.lib.store.staging import ensure_corpus, staged_passages

TABLES = ("judge_verdicts", "judge_repeat_verdicts", "judge_usage")
SAMPLE_FILE = "judge_sample.parquet"
SAMPLE_COUNTS = "judge_sample.json"


@dg.op(out=dg.DynamicOut(dict))
def plan_judging(
    generation_run: dict,
    suites: SuiteRegistryResource,
    warehouse_db: WarehouseResource,
    sharding: ShardingResource,
):
    """Draw the sample: tonight's answered golden items and, when the suite has a trace store,
    its answered production traces (stratum ``production``), each on a corpus state that can be
    staged (a trace on another is refused naming its line, as ``golden_set`` refused it)."""
    record = record_of(generation_run)
    suite = suites.suite(record.suite)
    store = warehouse_db.run_store()
    run_dir = store.run_dir(record.eval_run_id)
    items = store.read_table(store.golden_dir(record.golden_digest), "golden_items")
    answered = answered_golden(
        store.read_table(run_dir, "generation_results"), items, record.corpus_digest
    )
    production = load_traces(suite.trace_store) if suite.trace_store else None
    digests = {record.corpus_digest}
    if production is not None:
        digests |= set(production["corpus_digest"].unique())
    known = {d for d in digests if ensure_corpus(store, suite.corpus_root, d, utc_now())}
    if production is not None:
        check_trace_store(production, suite.trace_store, known)  # as golden_set checked it
    candidates, unknown = judge_candidates(answered, production, known)
    sample = sample_for_judging(candidates, record.settings.judge_sample_size, record.settings.seed)
    store.write_parquet(run_dir / SAMPLE_FILE, sample)
    for table in TABLES:
        store.remove_table(run_dir, table)
    store.write_json(
        run_dir / SAMPLE_COUNTS,
        {"answered_items": answered.height, "production_traces_without_corpus": unknown},
    )
    yield from fan_out(record, sharding.count())


@dg.op
def judge_shard(shard: dict, judge: JudgeResource, warehouse_db: WarehouseResource) -> dict:
    """The claims of the shard's sampled traces, each judged ``judge_repeats`` times against the
    passages of its own corpus state; the shard may spend its share of the judge's budget."""
    spec, record = spec_of(shard)
    store = warehouse_db.run_store()
    run_dir = store.run_dir(record.eval_run_id)
    sample = items_of_shard(store.read_parquet(run_dir / SAMPLE_FILE), spec.shard, spec.shards)
    the_judge = judge.build(budget_share=1 / spec.shards)
    texts = passage_texts(
        staged_passages(store, set(sample["corpus_digest"]) | {record.corpus_digest})
    )
    judged = judge_traces(the_judge, sample, texts, repeats=record.settings.judge_repeats)
    run_id = pl.lit(record.eval_run_id).alias("eval_run_id")
    store.write_table(run_dir, "judge_verdicts", judged.verdicts.with_columns(run_id), spec.part)
    store.write_table(
        run_dir, "judge_repeat_verdicts", judged.repeats.with_columns(run_id), spec.part
    )
    usage = pl.DataFrame([usage_row(the_judge, "judge_sample")]).with_columns(run_id)
    store.write_table(run_dir, "judge_usage", usage, spec.part)
    return {**shard, "judge_id": the_judge.judge_id}


@dg.op
def finish_judging(
    context: dg.OpExecutionContext, shards: list[dict], warehouse_db: WarehouseResource
):
    """Every shard's verdicts are there."""
    store = warehouse_db.run_store()
    record = fan_in(store, shards, TABLES)
    run_dir = store.run_dir(record.eval_run_id)
    verdicts = store.read_table(run_dir, "judge_verdicts")
    sample = store.read_parquet(run_dir / SAMPLE_FILE)
    usage = store.read_table(run_dir, "judge_usage")
    exhausted = [reason for reason in usage["reason"].to_list() if reason]
    return dg.Output(
        run_handle(record, context.run_id),
        metadata={
            **table_metadata(verdicts, "judge_verdicts"),
            "eval_run_id": record.eval_run_id,
            "judge_id": shards[0]["judge_id"],
            "shards": len(shards),
            "sampled_items": sample.height,
            **store.read_json(run_dir / SAMPLE_COUNTS),
            "sampled_production_traces": int((sample["source"] == PRODUCTION).sum()),
            "verdicts": dg.MetadataValue.json(counts(verdicts, "verdict")),
            "judge_repeats": record.settings.judge_repeats,
            "judge_requests": int(usage["requests"].sum()),
            "judge_tokens": float(usage["tokens"].sum()),
            "judge_budget": "; ".join(exhausted) or "not exhausted",
            "corpus_digest": record.corpus_digest,
        },
    )


def build_judge_sample(partitions: dg.PartitionsDefinition) -> dg.AssetsDefinition:
    @sharded_asset(
        "judge_sample",
        partitions=partitions,
        group="judging",
        kinds={"parquet"},
        code_version="judge-sample-v4",
        description=(
            "A seeded sample of tonight's answered traces and, when the suite has a trace store, "
            "answered production traces (stratum production), stratified by stratum, split into "
            "claims (qualifiers kept) and judged ENTAILED / CONTRADICTED / UNSUPPORTED against the "
            "context sent, with the passage that supports or contradicts each claim; with "
            "judge_repeats R > 1 each claim R times (judge_repeat_verdicts). What the judge spent "
            "goes to judge_usage; a judge budget that runs out leaves the rest JUDGE_ERROR."
        ),
    )
    def judge_sample(generation_run):
        shards = plan_judging(generation_run).map(judge_shard).collect()
        return finish_judging(shards)

    return judge_sample
