"""The judge sample asset: claims of sampled answers, judged against the context sent."""

import dagster as dg
import polars as pl

from rag_eval_pipeline.defs.metadata import counts, evaluation_asset, table_metadata
from rag_eval_pipeline.defs.resources import (
    JudgeResource,
    SuiteRegistryResource,
    WarehouseResource,
)
from rag_eval_pipeline.defs.retrieval_run import record_of
from rag_eval_pipeline.lib.inputs.traces import load_traces
from rag_eval_pipeline.lib.judges.run import (
    GOLDEN,
    PRODUCTION,
    judge_candidates,
    judge_traces,
    passage_texts,
    sample_for_judging,
)
from rag_eval_pipeline.lib.runs.registry import utc_now
from rag_eval_pipeline.lib.store.staging import ensure_corpus, staged_passages


def build_judge_sample(partitions: dg.PartitionsDefinition) -> dg.AssetsDefinition:
    @evaluation_asset(
        "judge_sample",
        partitions=partitions,
        group="judging",
        kinds={"parquet"},
        code_version="judge-sample-v2",
    )
    def judge_sample(
        context: dg.AssetExecutionContext,
        generation_run: dict,
        suites: SuiteRegistryResource,
        judge: JudgeResource,
        warehouse_db: WarehouseResource,
    ):
        """A seeded sample of tonight's answered traces and, when the suite has a trace store,
        answered production traces (stratum ``production``), stratified by stratum, split into
        claims (qualifiers kept) and judged ENTAILED / CONTRADICTED / UNSUPPORTED against the
        context sent, with the passage that supports or contradicts each claim. A production
        trace is judged against the passages of its own corpus state (staged from the suite's
        snapshot with that digest); traces whose corpus state cannot be found are left out."""
        record = record_of(generation_run)
        suite = suites.suite(record.suite)
        store = warehouse_db.run_store()
        run_dir = store.run_dir(record.eval_run_id)
        items = store.read_table(store.golden_dir(record.golden_digest), "golden_items")
        answered = (
            store.read_table(run_dir, "generation_results")
            .filter(~pl.col("refused"))
            .join(items.select("item_id", "stratum"), on="item_id")
            .select(
                "item_id",
                "answer",
                "context_ids",
                "stratum",
                corpus_digest=pl.lit(record.corpus_digest),
                source=pl.lit(GOLDEN),
            )
        )
        production = load_traces(suite.trace_store) if suite.trace_store else None
        digests = {record.corpus_digest}
        if production is not None:
            digests |= set(production["corpus_digest"].unique())
        known = {d for d in digests if ensure_corpus(store, suite.corpus_root, d, utc_now())}
        candidates, unknown = judge_candidates(answered, production, known)
        sample = sample_for_judging(
            candidates, record.settings.judge_sample_size, record.settings.seed
        )
        the_judge = judge.build()
        texts = passage_texts(
            staged_passages(store, set(sample["corpus_digest"]) | {record.corpus_digest})
        )
        verdicts = judge_traces(the_judge, sample, texts).with_columns(
            eval_run_id=pl.lit(record.eval_run_id)
        )
        store.write_table(run_dir, "judge_verdicts", verdicts)
        return dg.Output(
            generation_run,
            metadata={
                **table_metadata(verdicts, "judge_verdicts"),
                "eval_run_id": record.eval_run_id,
                "judge_id": the_judge.judge_id,
                "sampled_items": sample.height,
                "answered_items": answered.height,
                "sampled_production_traces": int((sample["source"] == PRODUCTION).sum()),
                "production_traces_without_corpus": unknown,
                "verdicts": dg.MetadataValue.json(counts(verdicts, "verdict")),
                "corpus_digest": record.corpus_digest,
            },
        )

    return judge_sample
