"""Claim-level diagnostics of judged answers against their reference answers (RAGChecker-style).

For every sampled, answered trace of an answerable golden item with reference answers (tonight's
golden answers, and production traces that name a golden ``item_id``), the judge is asked:

- each **answer claim** (the claims of ``judge_verdicts``) against the **reference answer** (each
  reference answer one passage of the context, ``reference#1``, ...): ``ref(a)``, correctness;
- each answer claim against **each context passage** alone: ``ctx(a, p)``;
- each **reference claim** (the reference answers split by the judge's own ``claims_batch``, a
  text stated twice counted once) against the **answer** (citation markers removed):
  ``ans(r)``;
- each reference claim against each context passage alone: ``ctx(r, p)``.

``lib.metrics.claim_diagnostics`` turns these verdicts into the per-item metrics (claim recall,
context claim recall, context precision, context utilisation, noise sensitivity in relevant and
irrelevant passages, hallucination, self-knowledge, faithfulness), each with its CONTRADICTED /
UNSUPPORTED split; formulas there. A passage is relevant when its gold grade for the item is at
least the run's ``rel_level`` (an ungraded passage is not). The aggregate is the mean over the
items where a metric is defined (RAGChecker's macro average) with a seeded percentile bootstrap
interval, per source.

An item any of whose verdicts is ``JUDGE_ERROR`` is left out of the diagnostics (a failed call is
not an UNSUPPORTED verdict) and counted (``items_with_judge_errors``). Reference answers in a
golden set are often short spans ("within 4 hours"); a full-sentence answer claim is then rarely
ENTAILED by them, so ``precision`` understates correctness while the recall metrics (a short
reference claim found in the answer or the context) read as intended.
"""

from collections.abc import Mapping
from typing import NamedTuple

import numpy as np
import polars as pl

from rag_eval_pipeline.lib.judges.claims import CITATION
from rag_eval_pipeline.lib.judges.protocol import JUDGE_ERROR, Context, Judge, Verdict
from rag_eval_pipeline.lib.metrics.claim_diagnostics import (
    COUNT_COLUMNS,
    METRICS,
    aggregate_claim_diagnostics,
    claim_diagnostics,
)
from rag_eval_pipeline.lib.metrics.statistics import bootstrap_mean_interval, mean_interval_method
from rag_eval_pipeline.lib.store.tables import row_schema

ANSWER_CLAIM = "answer_claim"
REFERENCE_CLAIM = "reference_claim"
AGAINST_REFERENCE = "reference"
AGAINST_ANSWER = "answer"
AGAINST_PASSAGE = "passage"
JUDGE_ERROR_ITEMS = "items_with_judge_errors"
KEY_SEPARATOR = "\x1f"


class DiagnosticItem(NamedTuple):
    """One trace to diagnose: its key in ``judge_verdicts``, its golden item and what it sent."""

    source: str
    item_id: str
    golden_item_id: str
    answer: str
    context: list[tuple[str, str]]
    reference_answers: list[str]


class DiagnosticPair(NamedTuple):
    """One question put to the judge: ``claim`` against ``context``, and what it is about."""

    source: str
    item_id: str
    subject: str
    claim_index: int
    claim: str
    against: str
    passage_id: str | None
    context: Context


def diagnostic_items(
    traces: pl.DataFrame,
    items: pl.DataFrame,
    texts: Mapping[tuple[str, str], str],
) -> list[DiagnosticItem]:
    """The traces to diagnose. ``traces``: ``source, item_id, golden_item_id, answer,
    context_ids, corpus_digest`` of the sampled answered traces; ``items``: the golden items.
    Kept: traces whose golden item is answerable and has reference answers."""
    references = {
        item_id: list(answers)
        for item_id, answers, answerable in items.select(
            "item_id", "reference_answers", "answerable"
        ).rows()
        if answerable and answers
    }
    chosen = []
    for source, item_id, golden_item_id, answer, context_ids, digest in traces.select(
        "source", "item_id", "golden_item_id", "answer", "context_ids", "corpus_digest"
    ).rows():
        if golden_item_id not in references:
            continue
        context = [
            (pid, texts[(digest, pid)])
            for pid in dict.fromkeys(context_ids)
            if (digest, pid) in texts
        ]
        chosen.append(
            DiagnosticItem(
                source, item_id, golden_item_id, answer, context, references[golden_item_id]
            )
        )
    return chosen


def reference_claims(judge: Judge, chosen: list[DiagnosticItem]) -> dict[str, list[str] | None]:
    """Per golden item, the claims of its reference answers (the judge's split, texts stated
    twice kept once); ``None`` when a split failed."""
    answers = sorted({answer for item in chosen for answer in item.reference_answers})
    splits = dict(zip(answers, judge.claims_batch(answers), strict=True)) if answers else {}
    claims: dict[str, list[str] | None] = {}
    for item in chosen:
        if item.golden_item_id in claims:
            continue
        parts = [splits[answer] for answer in item.reference_answers]
        claims[item.golden_item_id] = (
            None
            if any(part is None for part in parts)
            else list(dict.fromkeys(c.text for part in parts for c in part))
        )
    return claims


def diagnostic_pairs(
    chosen: list[DiagnosticItem],
    answer_claims: dict[tuple[str, str], list[tuple[int, str]]],
    references: dict[str, list[str] | None],
) -> list[DiagnosticPair]:
    """Every question of the module docstring for the chosen items, in item order.
    ``answer_claims``: per ``(source, item_id)`` the ``(claim_index, claim)`` judged."""
    pairs: list[DiagnosticPair] = []
    for item in chosen:
        reference = [(f"reference#{n}", text) for n, text in enumerate(item.reference_answers, 1)]
        answer = [(AGAINST_ANSWER, " ".join(CITATION.sub(" ", item.answer).split()))]
        subjects = [
            (ANSWER_CLAIM, index, text, AGAINST_REFERENCE, reference)
            for index, text in answer_claims.get((item.source, item.item_id), [])
        ] + [
            (REFERENCE_CLAIM, index, text, AGAINST_ANSWER, answer)
            for index, text in enumerate(references.get(item.golden_item_id) or [], start=1)
        ]
        for subject, index, text, against, whole in subjects:
            pairs.append(
                DiagnosticPair(
                    item.source, item.item_id, subject, index, text, against, None, whole
                )
            )
            for passage_id, passage_text in item.context:
                pairs.append(
                    DiagnosticPair(
                        item.source,
                        item.item_id,
                        subject,
                        index,
                        text,
                        AGAINST_PASSAGE,
                        passage_id,
                        [(passage_id, passage_text)],
                    )
                )
    return pairs


def verdict_rows(pairs: list[DiagnosticPair], verdicts: list[Verdict]) -> pl.DataFrame:
    """``diagnostic_verdicts`` rows (without ``eval_run_id``)."""
    rows = [
        {
            "source": pair.source,
            "item_id": pair.item_id,
            "subject": pair.subject,
            "claim_index": pair.claim_index,
            "claim": pair.claim,
            "against": pair.against,
            "passage_id": pair.passage_id,
            "verdict": verdict.verdict,
            "replayed": verdict.replayed,
        }
        for pair, verdict in zip(pairs, verdicts, strict=True)
    ]
    return pl.DataFrame(rows, schema=row_schema("diagnostic_verdicts"))


def _key(source: pl.Expr, item_id: pl.Expr) -> pl.Expr:
    return pl.concat_str(source, pl.lit(KEY_SEPARATOR), item_id).alias("item_id")


def per_item_diagnostics(
    chosen: list[DiagnosticItem],
    verdicts: pl.DataFrame,
    gold: pl.DataFrame,
    *,
    rel_level: int,
) -> tuple[pl.DataFrame, int]:
    """``claim_diagnostics`` per item (item key ``source`` + ``item_id``), from the verdict rows;
    with the number of items left out because a verdict failed."""
    failed = verdicts.filter(pl.col("verdict") == JUDGE_ERROR).select("source", "item_id").unique()
    good = verdicts.join(failed, on=["source", "item_id"], how="anti").with_columns(
        _key(pl.col("source"), pl.col("item_id")), pl.col("claim_index").cast(pl.String)
    )
    failed_keys = set(failed.rows())
    kept = [item for item in chosen if (item.source, item.item_id) not in failed_keys]
    keys = [f"{item.source}{KEY_SEPARATOR}{item.item_id}" for item in kept]
    grades = {(i, p): g for i, p, g in gold.select("item_id", "passage_id", "grade").rows()}
    passages = pl.DataFrame(
        [
            {
                "item_id": key,
                "passage_id": passage_id,
                "gold_grade": grades.get((item.golden_item_id, passage_id)),
            }
            for key, item in zip(keys, kept, strict=True)
            for passage_id, _ in item.context
        ],
        schema={"item_id": pl.String, "passage_id": pl.String, "gold_grade": pl.Int64},
    )

    def whole(subject: str, column: str) -> pl.DataFrame:
        return good.filter(
            (pl.col("subject") == subject) & (pl.col("against") != AGAINST_PASSAGE)
        ).select(
            "item_id", pl.col("claim_index").alias("claim_id"), pl.col("verdict").alias(column)
        )

    def by_passage(subject: str) -> pl.DataFrame:
        return good.filter(
            (pl.col("subject") == subject) & (pl.col("against") == AGAINST_PASSAGE)
        ).select("item_id", pl.col("claim_index").alias("claim_id"), "passage_id", "verdict")

    per_item = claim_diagnostics(
        answer_claims=whole(ANSWER_CLAIM, "reference_verdict"),
        reference_claims=whole(REFERENCE_CLAIM, "answer_verdict"),
        passages=passages,
        answer_claim_verdicts=by_passage(ANSWER_CLAIM),
        reference_claim_verdicts=by_passage(REFERENCE_CLAIM),
        min_relevant_grade=rel_level,
        items=keys,
    )
    return per_item, len(chosen) - len(kept)


def item_metric_rows(per_item: pl.DataFrame, chosen: list[DiagnosticItem]) -> pl.DataFrame:
    """``diagnostic_item_metrics`` rows (without ``eval_run_id``): one per item and metric, the
    counts of ``COUNT_COLUMNS`` included, ``value`` null where the metric is undefined."""
    golden = {f"{i.source}{KEY_SEPARATOR}{i.item_id}": i.golden_item_id for i in chosen}
    long = (
        per_item.with_columns(pl.col(list(COUNT_COLUMNS)).cast(pl.Float64))
        .unpivot(index="item_id", on=[*COUNT_COLUMNS, *METRICS], variable_name="metric")
        .with_columns(
            pl.col("item_id")
            .replace_strict(golden, return_dtype=pl.String)
            .alias("golden_item_id"),
            pl.col("item_id").str.split_exact(KEY_SEPARATOR, 1).alias("key"),
        )
        .with_columns(
            pl.col("key").struct.field("field_0").alias("source"),
            pl.col("key").struct.field("field_1").alias("item_id"),
        )
    )
    return long.select(*row_schema("diagnostic_item_metrics")).cast(
        row_schema("diagnostic_item_metrics")
    )


def aggregate_rows(
    per_item: pl.DataFrame, chosen: list[DiagnosticItem], errors: dict[str, int], *, seed: int
) -> pl.DataFrame:
    """``diagnostic_metrics`` rows (without ``eval_run_id``): per source, the mean of every metric
    over the items where it is defined, its bootstrap interval, the items counted and left out;
    and ``items_with_judge_errors`` (value: items left out of every metric)."""
    sources = sorted({item.source for item in chosen})
    rows = []
    for source in sources:
        prefix = f"{source}{KEY_SEPARATOR}"
        subset = per_item.filter(pl.col("item_id").str.starts_with(prefix))
        means = aggregate_claim_diagnostics(subset)
        for metric, mean, n_items, left_out in means.rows():
            values = np.asarray(subset.get_column(metric).drop_nulls().to_numpy(), dtype=float)
            low, high = bootstrap_mean_interval(values, seed=seed)
            rows.append(
                {
                    "scope": "source",
                    "scope_value": source,
                    "metric": metric,
                    "value": mean,
                    "ci_low": low,
                    "ci_high": high,
                    "n_items": n_items,
                    "n_items_left_out": left_out,
                    "interval_method": mean_interval_method(values),
                }
            )
        considered = sum(1 for item in chosen if item.source == source)
        rows.append(
            {
                "scope": "source",
                "scope_value": source,
                "metric": JUDGE_ERROR_ITEMS,
                "value": float(errors.get(source, 0)),
                "ci_low": None,
                "ci_high": None,
                "n_items": considered,
                "n_items_left_out": 0,
                "interval_method": "count",
            }
        )
    return pl.DataFrame(rows, schema=row_schema("diagnostic_metrics"))


class Diagnostics(NamedTuple):
    """The three diagnostic tables of a run (without ``eval_run_id``)."""

    verdicts: pl.DataFrame
    item_metrics: pl.DataFrame
    metrics: pl.DataFrame


def diagnose(
    judge: Judge,
    chosen: list[DiagnosticItem],
    judged: pl.DataFrame,
    gold: pl.DataFrame,
    *,
    rel_level: int,
    seed: int,
) -> Diagnostics:
    """Ask the judge every question of the module docstring in one batch and compute the
    diagnostics. ``judged``: the run's ``judge_verdicts`` (the answer claims are its rows with a
    claim index from 1); ``gold``: ``golden_gold``."""
    claims = judged.filter(pl.col("claim_index") >= 1).sort("source", "item_id", "claim_index")
    answer_claims: dict[tuple[str, str], list[tuple[int, str]]] = {}
    for source, item_id, index, claim in claims.select(
        "source", "item_id", "claim_index", "claim"
    ).rows():
        answer_claims.setdefault((source, item_id), []).append((index, claim))
    references = reference_claims(judge, chosen)
    pairs = diagnostic_pairs(chosen, answer_claims, references)
    verdicts = verdict_rows(pairs, judge.verdicts([(p.claim, p.context) for p in pairs]))
    split_failed = {
        (item.source, item.item_id) for item in chosen if references[item.golden_item_id] is None
    }
    if split_failed:
        # A reference answer whose split failed: the item's recall metrics cannot be computed.
        failed_rows = pl.DataFrame(
            [
                {
                    "source": source,
                    "item_id": item_id,
                    "subject": REFERENCE_CLAIM,
                    "claim_index": 0,
                    "claim": "",
                    "against": AGAINST_ANSWER,
                    "passage_id": None,
                    "verdict": JUDGE_ERROR,
                    "replayed": False,
                }
                for source, item_id in sorted(split_failed)
            ],
            schema=verdicts.schema,
        )
        verdicts = pl.concat([verdicts, failed_rows])
    per_item, _ = per_item_diagnostics(chosen, verdicts, gold, rel_level=rel_level)
    failed = verdicts.filter(pl.col("verdict") == JUDGE_ERROR).select("source", "item_id").unique()
    errors = dict(failed.group_by("source").len().rows())
    return Diagnostics(
        verdicts,
        item_metric_rows(per_item, chosen),
        aggregate_rows(per_item, chosen, errors, seed=seed),
    )


def judged_traces(
    verdicts: pl.DataFrame,
    generation: pl.DataFrame,
    production: pl.DataFrame | None,
    corpus_digest: str,
) -> pl.DataFrame:
    """The judged traces with what they sent: ``source, item_id, golden_item_id, answer,
    context_ids, corpus_digest``. Golden traces from ``generation_results`` (tonight's corpus
    state); production traces from the trace store (``load_traces``), those naming a golden
    ``item_id`` only (the others have no reference answer)."""
    judged = verdicts.select("source", "item_id").unique()
    golden = generation.join(
        judged.filter(pl.col("source") == "golden"), on="item_id", how="semi"
    ).select(
        pl.lit("golden").alias("source"),
        "item_id",
        pl.col("item_id").alias("golden_item_id"),
        "answer",
        "context_ids",
        pl.lit(corpus_digest).alias("corpus_digest"),
    )
    if production is None:
        return golden.sort("source", "item_id")
    traces = (
        production.filter(pl.col("item_id").is_not_null())
        .join(
            judged.filter(pl.col("source") == "production"),
            left_on="trace_id",
            right_on="item_id",
            how="semi",
        )
        .select(
            pl.lit("production").alias("source"),
            pl.col("trace_id").alias("item_id"),
            pl.col("item_id").alias("golden_item_id"),
            "answer",
            "context_ids",
            "corpus_digest",
        )
    )
    return pl.concat([golden, traces]).sort("source", "item_id")
