"""The judge sample asset: claims of sampled answers, judged against the context sent."""

import dagster as dg
import polars as pl

from rag_eval_pipeline.defs.metadata import TEAM, table_metadata
from rag_eval_pipeline.defs.partitions import nightly_partitions
from rag_eval_pipeline.defs.resources import (
    DeterministicJudgeResource,
    EvalSettings,
    WarehouseResource,
    project_path,
)
from rag_eval_pipeline.lib import warehouse
from rag_eval_pipeline.lib.judge import ENTAILED
from rag_eval_pipeline.lib.sampling import stratified_sample
from rag_eval_pipeline.lib.traces import load_traces

PRODUCTION = "production"

VERDICT_SCHEMA = {
    "eval_run_id": pl.String,
    "item_id": pl.String,
    "source": pl.String,
    "claim_index": pl.Int32,
    "claim": pl.String,
    "cited_ids": pl.List(pl.String),
    "verdict": pl.String,
    "passage_id": pl.String,
    "citation_supported": pl.Boolean,
    "judge_id": pl.String,
    "replayed": pl.Boolean,
}


def judge_traces(
    judge, traces: pl.DataFrame, texts: dict[str, str], run_id: str, source: str
) -> list[dict]:
    """Verdict rows for every claim of every trace (``item_id, answer, context_ids``).

    Each claim is judged against the exact context sent; a claim that carries citations is
    also judged against its cited passages alone, which gives citation support.
    """
    claimed = []
    for trace in traces.iter_rows(named=True):
        context = [(pid, texts[pid]) for pid in trace["context_ids"] if pid in texts]
        for index, claim in enumerate(judge.claims(trace["answer"]), start=1):
            cited = [(pid, texts[pid]) for pid in claim.cited_ids if pid in texts]
            claimed.append((trace["item_id"], index, claim, context, cited))
    pairs = [(claim.text, context) for _, _, claim, context, _ in claimed]
    pairs += [(claim.text, cited) for _, _, claim, _, cited in claimed if cited]
    verdicts = judge_pairs(judge, pairs)
    against_context, against_citations = verdicts[: len(claimed)], iter(verdicts[len(claimed) :])
    rows = []
    for (item_id, index, claim, _, cited), verdict in zip(claimed, against_context, strict=True):
        supported = None
        if claim.cited_ids:
            supported = bool(cited) and next(against_citations).verdict == ENTAILED
        rows.append(
            {
                "eval_run_id": run_id,
                "item_id": item_id,
                "source": source,
                "claim_index": index,
                "claim": claim.text,
                "cited_ids": list(claim.cited_ids),
                "verdict": verdict.verdict,
                "passage_id": verdict.passage_id,
                "citation_supported": supported,
                "judge_id": judge.judge_id,
                "replayed": verdict.replayed,
            }
        )
    return rows


def judge_pairs(judge, pairs: list) -> list:
    """All verdicts at once where the judge batches them (bounded concurrency), else one by one."""
    if hasattr(judge, "verdicts"):
        return judge.verdicts(pairs)
    return [judge.verdict(claim, context) for claim, context in pairs]


@dg.asset(
    partitions_def=nightly_partitions,
    group_name="judging",
    owners=[TEAM],
    kinds={"duckdb"},
    code_version="judge-sample-v1",
)
def judge_sample(
    context: dg.AssetExecutionContext,
    generation_run: dict,
    settings: EvalSettings,
    judge: DeterministicJudgeResource,
    warehouse_db: WarehouseResource,
):
    """A seeded sample of tonight's answered traces and, when ``trace_store`` is set, answered
    production traces (stratum ``production``), stratified by stratum, split into claims
    (qualifiers kept) and judged ENTAILED / CONTRADICTED / UNSUPPORTED against the context sent,
    with the passage that supports or contradicts each claim. Written to ``judge_verdicts`` with
    ``source`` golden or production. A production trace is judged against the passage texts of
    its own corpus digest; traces whose corpus state is not in the warehouse are left out."""
    run_id = generation_run["eval_run_id"]
    the_judge = judge.build()
    with warehouse_db.connect() as connection:
        answered = warehouse.read_frame(
            connection,
            "SELECT g.item_id, g.answer, g.context_ids, i.stratum, $digest AS corpus_digest, "
            "'golden' AS source "
            "FROM generation_results g JOIN golden_items i "
            "ON i.item_id = g.item_id AND i.golden_digest = $golden "
            "WHERE g.eval_run_id = $run AND NOT g.refused ORDER BY g.item_id",
            {
                "run": run_id,
                "golden": generation_run["golden_digest"],
                "digest": generation_run["corpus_digest"],
            },
        )
        known = warehouse.read_frame(
            connection, "SELECT DISTINCT corpus_digest FROM corpus_snapshots"
        )["corpus_digest"]
        production = answered.clear()
        if settings.trace_store:
            production = (
                load_traces(project_path(settings.trace_store))
                .filter(~pl.col("refused"))
                .select(
                    pl.col("trace_id").alias("item_id"),
                    "answer",
                    "context_ids",
                    pl.lit(PRODUCTION).alias("stratum"),
                    "corpus_digest",
                    pl.lit(PRODUCTION).alias("source"),
                )
            )
        unknown_corpus = production.filter(~pl.col("corpus_digest").is_in(known.implode()))
        candidates = pl.concat(
            [answered, production.join(unknown_corpus, on="item_id", how="anti")]
        )
        sample = stratified_sample(
            candidates, settings.judge_sample_size, by="stratum", seed=settings.seed
        )
        passages = warehouse.read_frame(
            connection,
            "SELECT DISTINCT passage_id, text FROM corpus_passages "
            "WHERE list_contains($digests, corpus_digest)",
            {"digests": [generation_run["corpus_digest"], *sample["corpus_digest"].unique()]},
        )
        texts = dict(zip(passages["passage_id"], passages["text"], strict=True))
        rows = [
            row
            for source in ("golden", PRODUCTION)
            for row in judge_traces(
                the_judge, sample.filter(pl.col("source") == source), texts, run_id, source
            )
        ]
        verdicts = pl.DataFrame(rows, schema=VERDICT_SCHEMA)
        warehouse.replace_rows(connection, "judge_verdicts", verdicts, {"eval_run_id": run_id})
    counts = {
        row["verdict"]: row["len"]
        for row in verdicts.group_by("verdict").len().iter_rows(named=True)
    }
    return dg.Output(
        generation_run,
        metadata={
            **table_metadata(verdicts, "judge_verdicts"),
            "eval_run_id": run_id,
            "judge_id": the_judge.judge_id,
            "sampled_items": sample.height,
            "answered_items": answered.height,
            "sampled_production_traces": int((sample["source"] == PRODUCTION).sum()),
            "production_traces_without_corpus": unknown_corpus.height,
            "verdicts": dg.MetadataValue.json(counts),
            "corpus_digest": generation_run["corpus_digest"],
        },
    )
