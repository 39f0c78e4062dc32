"""Judging a sample of answered traces: one verdict row per claim.

Each answer is split into claims (qualifiers kept) and each claim is judged against the exact
context sent; a claim that carries citations is also judged against its cited passages alone,
which gives citation support. Everything goes to the judge in two batches (all claim splits, then
all verdicts), so an LLM judge keeps its bounded concurrency busy.

An answer whose claim split failed gives one ``JUDGE_ERROR`` row (claim index 0, empty claim) for
its item and nothing else fails; a verdict that failed is ``JUDGE_ERROR`` too (never supported).
"""

import polars as pl

from rag_eval_pipeline.lib.judges.protocol import ENTAILED, JUDGE_ERROR, Judge
from rag_eval_pipeline.lib.judges.sampling import stratified_sample
from rag_eval_pipeline.lib.store.tables import row_schema

GOLDEN = "golden"
PRODUCTION = "production"


def judge_candidates(
    answered: pl.DataFrame, production: pl.DataFrame | None, known_digests: set[str]
) -> tuple[pl.DataFrame, int]:
    """Tonight's answered golden items and the answered production traces whose corpus state is
    known, as one frame ``item_id, answer, context_ids, stratum, corpus_digest, source``; with the
    number of production traces left out because their corpus state is not available."""
    if production is None or not production.height:
        return answered, 0
    traces = production.filter(~pl.col("refused")).select(
        pl.col("trace_id").alias("item_id"),
        "answer",
        "context_ids",
        pl.lit(PRODUCTION).alias("stratum"),
        "corpus_digest",
        pl.lit(PRODUCTION).alias("source"),
    )
    known = traces.filter(pl.col("corpus_digest").is_in(sorted(known_digests)))
    return pl.concat([answered, known], how="vertical_relaxed"), traces.height - known.height


def sample_for_judging(candidates: pl.DataFrame, size: int, seed: int) -> pl.DataFrame:
    """A seeded sample stratified by stratum (production traces are one stratum)."""
    return stratified_sample(candidates, size, by="stratum", seed=seed)


def passage_texts(passages: pl.DataFrame) -> dict[tuple[str, str], str]:
    """Passage texts keyed by ``(corpus_digest, passage_id)``: a document edited in place keeps
    its passage ids, so the text of an id depends on the corpus state."""
    return {
        (digest, passage_id): text
        for digest, passage_id, text in passages.select(
            "corpus_digest", "passage_id", "text"
        ).rows()
    }


def judge_traces(
    judge: Judge, sample: pl.DataFrame, texts: dict[tuple[str, str], str]
) -> pl.DataFrame:
    """Verdict rows (``judge_verdicts`` without ``eval_run_id``) for every claim of every sampled
    trace (``item_id, answer, context_ids, corpus_digest, source``), each judged against the
    passage texts of the trace's own corpus state."""
    traces = sample.select("item_id", "answer", "context_ids", "corpus_digest", "source").rows()
    splits = judge.claims_batch([answer for _, answer, *_ in traces])
    claimed = []
    failed = []
    for (item_id, _, context_ids, digest, source), claims in zip(traces, splits, strict=True):
        if claims is None:
            failed.append((item_id, source))
            continue

        def passages_of(ids, digest=digest):
            return [(pid, texts[(digest, pid)]) for pid in ids if (digest, pid) in texts]

        context = passages_of(context_ids)
        for index, claim in enumerate(claims, start=1):
            claimed.append((item_id, source, index, claim, context, passages_of(claim.cited_ids)))
    pairs = [(claim.text, context) for *_, claim, context, _ in claimed]
    pairs += [(claim.text, cited) for *_, claim, _, cited in claimed if cited]
    verdicts = judge.verdicts(pairs) if pairs else []
    against_context, against_citations = verdicts[: len(claimed)], iter(verdicts[len(claimed) :])
    rows = []
    for (item_id, source, index, claim, _, cited), verdict in zip(
        claimed, against_context, strict=True
    ):
        supported = None
        if claim.cited_ids:
            if cited:
                cited_verdict = next(against_citations).verdict
                supported = None if cited_verdict == JUDGE_ERROR else cited_verdict == ENTAILED
            else:
                supported = False
        rows.append(
            {
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
    for item_id, source in failed:
        rows.append(
            {
                "item_id": item_id,
                "source": source,
                "claim_index": 0,
                "claim": "",
                "cited_ids": [],
                "verdict": JUDGE_ERROR,
                "passage_id": None,
                "citation_supported": None,
                "judge_id": judge.judge_id,
                "replayed": False,
            }
        )
    return pl.DataFrame(rows, schema=row_schema("judge_verdicts"))
