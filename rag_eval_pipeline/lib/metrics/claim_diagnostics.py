"""RAGChecker-style claim-level diagnostics, with ENTAILED / CONTRADICTED / UNSUPPORTED kept apart.

Definitions follow Ru et al., "RAGChecker: A Fine-grained Framework for Diagnosing
Retrieval-Augmented Generation" (2024) and the metric code of its repository
(amazon-science/RAGChecker, ``ragchecker/metrics.py``). RAGChecker checks each claim as
"Entailment" or not; it collapses CONTRADICTED and UNSUPPORTED into "not entailed". Every metric
below is RAGChecker's, and where it collapses the two, the split is reported next to it, so the
three verdicts stay apart.

Vocabulary (RAGChecker's word in brackets)
------------------------------------------
* answer claim (response claim): a claim of the assistant's answer.
* reference claim (ground-truth answer claim): a claim of the reference answer.
* passage (retrieved chunk): one context passage sent to the assistant for the item.
* ``ref(a)``: the verdict of answer claim ``a`` against the reference answer. ``a`` is *correct*
  when ``ref(a) = ENTAILED`` and *incorrect* otherwise. Note that ``ref(a) = UNSUPPORTED`` means
  "not in the reference", which may be a true statement the reference lacks; ``ref(a) =
  CONTRADICTED`` means the reference says otherwise. RAGChecker counts both as incorrect.
* ``ctx(x, p)``: the verdict of claim ``x`` against passage ``p`` (UNSUPPORTED when no row given).
  ``x`` is *in the context* when some passage entails it; otherwise it is *context-contradicted*
  when some passage contradicts it, and *context-unsupported* when none entails or contradicts it.
* ``ans(r)``: the verdict of reference claim ``r`` against the answer; ``r`` is *stated* when
  ``ans(r) = ENTAILED``.
* relevant passage: with ``relevance="gold_grade"`` (the default) a passage whose gold grade is at
  least ``min_relevant_grade`` (2); an ungraded passage (null grade) is not relevant (the TREC
  convention for unjudged documents). With ``relevance="reference_claims"``, RAGChecker's own
  definition: a passage that entails at least one reference claim.

Per-item metrics (``A`` answer claims, ``R`` reference claims, ``P`` passages of the item)
------------------------------------------------------------------------------------------
Suffixes name the verdict that splits a metric and the check it comes from: ``_ref_`` the answer
claim against the reference answer, ``_ctx_`` against the context passages, ``_ans_`` a reference
claim against the answer. Each split sums to its parent metric.

Overall [RAGChecker "overall metrics"]
    * ``precision`` [precision] = |{a ∈ A : ref(a) = E}| / |A|
      with ``incorrect_ref_contradicted`` = |{a : ref(a) = C}| / |A| and
      ``incorrect_ref_unsupported`` = |{a : ref(a) = U}| / |A|; the three sum to 1.
    * ``claim_recall`` [recall] = |{r ∈ R : ans(r) = E}| / |R|
      with ``claim_missed_ans_contradicted`` = |{r : ans(r) = C}| / |R| and
      ``claim_missed_ans_unsupported`` = |{r : ans(r) = U}| / |R| (not stated at all).
    * ``f1`` [f1] = 2·precision·claim_recall / (precision + claim_recall); 0 when both are 0.

Retriever [RAGChecker "retriever metrics"]
    * ``context_claim_recall`` [claim_recall] = |{r ∈ R : r in the context}| / |R|
      with ``context_claim_missed_ctx_contradicted`` (r context-contradicted) / |R| and
      ``context_claim_missed_ctx_unsupported`` (r context-unsupported) / |R|.
    * ``context_precision`` [context_precision] = |{p ∈ P : ∃ r ∈ R, ctx(r, p) = E}| / |P|.

Generator [RAGChecker "generator metrics"]
    * ``context_utilisation`` [context_utilization]
      = |{r ∈ R : r in the context ∧ ans(r) = E}| / |{r ∈ R : r in the context}|
      with ``context_unused_ans_contradicted`` (r in the context ∧ ans(r) = C) and
      ``context_unused_ans_unsupported`` (r in the context ∧ ans(r) = U), same denominator.
    * ``noise_sensitivity_in_relevant`` [noise_sensitivity_in_relevant]
      = |{a ∈ A : a incorrect ∧ ∃ relevant p, ctx(a, p) = E}| / |A|
      with ``..._ref_contradicted`` (ref(a) = C) and ``..._ref_unsupported`` (ref(a) = U).
    * ``noise_sensitivity_in_irrelevant`` [noise_sensitivity_in_irrelevant]
      = |{a ∈ A : a incorrect ∧ ∃ irrelevant p, ctx(a, p) = E ∧ ¬∃ relevant p, ctx(a, p) = E}| / |A|
      (exclusive of the relevant case, as in RAGChecker's code), with the same two splits.
    * ``hallucination`` [hallucination] = |{a ∈ A : a incorrect ∧ a not in the context}| / |A|
      split by the reference verdict: ``hallucination_ref_contradicted`` (ref(a) = C) and
      ``hallucination_ref_unsupported`` (ref(a) = U); and, separately, by the context verdict:
      ``hallucination_ctx_contradicted`` (a context-contradicted: an intrinsic error) and
      ``hallucination_ctx_unsupported`` (a context-unsupported: an extrinsic addition).
    * ``self_knowledge`` [self_knowledge] = |{a ∈ A : a correct ∧ a not in the context}| / |A|
      with ``self_knowledge_ctx_contradicted`` (correct although a passage contradicts it) and
      ``self_knowledge_ctx_unsupported``.
    * ``faithfulness`` [faithfulness] = |{a ∈ A : a in the context}| / |A|
      with ``unfaithful_ctx_contradicted`` and ``unfaithful_ctx_unsupported`` (a
      context-contradicted / context-unsupported, over |A|); the three sum to 1.

Identities: ``hallucination + self_knowledge + faithfulness = 1``, and
``noise_sensitivity_in_relevant + noise_sensitivity_in_irrelevant ≤ faithfulness`` (the rest of
the faithful claims are correct).

Empty denominators: the metric is ``None`` for that item (the item is left out of the mean),
never 0. ``|A| = 0`` (an empty answer or an abstention) leaves out every answer-claim metric;
``|R| = 0`` the recall metrics; no reference claim in the context leaves out
``context_utilisation``; ``|P| = 0`` leaves out ``context_precision`` (an item with answer claims
but no passages still has faithfulness 0 and hallucination = the incorrect share). Two further
rules follow RAGChecker's guards: ``context_precision`` is also ``None`` when ``|R| = 0`` (no
reference claim, so no passage can be useful), and with ``relevance="reference_claims"`` the noise
sensitivities are ``None`` when ``|R| = 0`` (relevance is undefined). RAGChecker itself writes 0 in
all these cases; we do not. ``f1`` is ``None`` when precision or claim recall is.

Input schema (long format, Polars frames; id columns are compared as strings)
-----------------------------------------------------------------------------
``answer_claims``: one row per answer claim.
    ``item_id``, ``claim_id`` (unique within the item), ``reference_verdict`` (ENTAILED /
    CONTRADICTED / UNSUPPORTED: the answer claim checked against the reference answer).
``reference_claims``: one row per reference-answer claim.
    ``item_id``, ``claim_id`` (unique within the item), ``answer_verdict`` (the reference claim
    checked against the answer: ENTAILED = stated by the answer).
``passages``: one row per context passage sent for the item (all of them: they are the
    denominator of context precision).
    ``item_id``, ``passage_id`` (unique within the item), ``gold_grade`` (integer, null when
    ungraded).
``answer_claim_verdicts``: the verdict of an answer claim against one passage.
    ``item_id``, ``claim_id``, ``passage_id``, ``verdict``. At most one row per
    (item, claim, passage); a missing pair means UNSUPPORTED (so a judge that reports only the
    passages that entail or contradict a claim can be used as it is).
``reference_claim_verdicts``: the same for reference claims against passages.
    ``item_id``, ``claim_id``, ``passage_id``, ``verdict``.
Every verdict row must name a claim of its frame and a passage of ``passages`` for the same item;
extra columns are ignored. Items are the union of the ``item_id`` values of ``answer_claims``,
``reference_claims`` and ``passages`` (sorted), or exactly ``items`` when it is given.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import polars as pl

ENTAILED = "ENTAILED"
CONTRADICTED = "CONTRADICTED"
UNSUPPORTED = "UNSUPPORTED"
VERDICTS = (ENTAILED, CONTRADICTED, UNSUPPORTED)

Relevance = Literal["gold_grade", "reference_claims"]

COUNT_COLUMNS = (
    "n_answer_claims",
    "n_reference_claims",
    "n_passages",
    "n_relevant_passages",
    "n_reference_claims_in_context",
)
"""Per-item counts reported with the metrics (the denominators)."""

METRICS = (
    "precision",
    "incorrect_ref_contradicted",
    "incorrect_ref_unsupported",
    "claim_recall",
    "claim_missed_ans_contradicted",
    "claim_missed_ans_unsupported",
    "f1",
    "context_claim_recall",
    "context_claim_missed_ctx_contradicted",
    "context_claim_missed_ctx_unsupported",
    "context_precision",
    "context_utilisation",
    "context_unused_ans_contradicted",
    "context_unused_ans_unsupported",
    "noise_sensitivity_in_relevant",
    "noise_sensitivity_in_relevant_ref_contradicted",
    "noise_sensitivity_in_relevant_ref_unsupported",
    "noise_sensitivity_in_irrelevant",
    "noise_sensitivity_in_irrelevant_ref_contradicted",
    "noise_sensitivity_in_irrelevant_ref_unsupported",
    "hallucination",
    "hallucination_ref_contradicted",
    "hallucination_ref_unsupported",
    "hallucination_ctx_contradicted",
    "hallucination_ctx_unsupported",
    "self_knowledge",
    "self_knowledge_ctx_contradicted",
    "self_knowledge_ctx_unsupported",
    "faithfulness",
    "unfaithful_ctx_contradicted",
    "unfaithful_ctx_unsupported",
)
"""Every per-item metric, in report order (see the module docstring for each formula)."""

_ITEM = "item_id"
_CLAIM = "claim_id"
_PASSAGE = "passage_id"


def claim_diagnostics(
    *,
    answer_claims: pl.DataFrame,
    reference_claims: pl.DataFrame,
    passages: pl.DataFrame,
    answer_claim_verdicts: pl.DataFrame,
    reference_claim_verdicts: pl.DataFrame,
    relevance: Relevance = "gold_grade",
    min_relevant_grade: int = 2,
    items: Sequence[str] | None = None,
) -> pl.DataFrame:
    """Per-item RAGChecker diagnostics with the CONTRADICTED / UNSUPPORTED splits.

    Inputs follow the long-format schema of the module docstring (``answer_claims``:
    item_id, claim_id, reference_verdict; ``reference_claims``: item_id, claim_id,
    answer_verdict; ``passages``: item_id, passage_id, gold_grade; ``answer_claim_verdicts`` and
    ``reference_claim_verdicts``: item_id, claim_id, passage_id, verdict, a missing pair being
    UNSUPPORTED). ``relevance`` picks what a relevant passage is for the noise sensitivities:
    ``"gold_grade"`` (grade ≥ ``min_relevant_grade``) or ``"reference_claims"`` (RAGChecker's:
    entails a reference claim).

    Returns one row per item: ``item_id``, the counts of :data:`COUNT_COLUMNS` and the Float64
    metrics of :data:`METRICS`, each ``None`` where its denominator is empty (formulas and
    rules in the module docstring). Raises ``ValueError`` on a missing column, an unknown or null
    verdict, a duplicate key or a verdict row naming an unknown claim or passage.
    """
    if relevance not in ("gold_grade", "reference_claims"):
        raise ValueError(f"relevance must be 'gold_grade' or 'reference_claims', not {relevance!r}")
    answers = _claims_frame(answer_claims, "answer_claims", "reference_verdict")
    references = _claims_frame(reference_claims, "reference_claims", "answer_verdict")
    context = _passages_frame(passages)
    answer_checks = _verdicts_frame(answer_claim_verdicts, "answer_claim_verdicts")
    reference_checks = _verdicts_frame(reference_claim_verdicts, "reference_claim_verdicts")
    _check_references(answer_checks, answers, context, "answer_claim_verdicts", "answer_claims")
    _check_references(
        reference_checks, references, context, "reference_claim_verdicts", "reference_claims"
    )
    item_frame = _item_frame(items, answers, references, context)

    useful = (
        reference_checks.filter(pl.col("verdict") == ENTAILED)
        .select(_ITEM, _PASSAGE)
        .unique()
        .with_columns(pl.lit(True).alias("useful"))
    )
    context = context.join(useful, on=[_ITEM, _PASSAGE], how="left").with_columns(
        pl.col("useful").fill_null(False)
    )
    if relevance == "gold_grade":
        relevant = pl.col("gold_grade").fill_null(min_relevant_grade - 1) >= min_relevant_grade
    else:
        relevant = pl.col("useful")
    context = context.with_columns(relevant.alias("relevant"))

    per_item = (
        item_frame.join(_answer_counts(answers, answer_checks, context), on=_ITEM, how="left")
        .join(_reference_counts(references, reference_checks), on=_ITEM, how="left")
        .join(_passage_counts(context), on=_ITEM, how="left")
    )
    count_names = [c for c in per_item.columns if c != _ITEM]
    per_item = per_item.with_columns(pl.col(count_names).fill_null(0).cast(pl.Int64))
    return per_item.select(
        _ITEM,
        pl.col("n_answer_claims"),
        pl.col("n_reference_claims"),
        pl.col("n_passages"),
        pl.col("n_relevant_passages"),
        pl.col("n_reference_claims_in_context"),
        *_metric_expressions(relevance),
    )


def aggregate_claim_diagnostics(per_item: pl.DataFrame) -> pl.DataFrame:
    """Mean of each metric over the items where it is defined (a macro average, as RAGChecker).

    ``per_item`` is the frame from :func:`claim_diagnostics` (or any subset of its rows). Returns
    one row per metric of :data:`METRICS` present in it: ``metric``, ``mean`` (``None`` when no
    item has the metric), ``n_items`` (items that count) and ``n_items_left_out`` (items whose
    denominator was empty, so the metric was ``None`` and is not averaged in as 0).
    """
    rows = []
    for metric in METRICS:
        if metric not in per_item.columns:
            continue
        column = per_item.get_column(metric)
        kept = column.drop_nulls()
        rows.append(
            {
                "metric": metric,
                "mean": float(kept.mean()) if kept.len() else None,
                "n_items": kept.len(),
                "n_items_left_out": column.null_count(),
            }
        )
    return pl.DataFrame(
        rows,
        schema={
            "metric": pl.String,
            "mean": pl.Float64,
            "n_items": pl.Int64,
            "n_items_left_out": pl.Int64,
        },
    )


def _answer_counts(
    answers: pl.DataFrame, checks: pl.DataFrame, context: pl.DataFrame
) -> pl.DataFrame:
    """Per item: answer claims and the claim counts behind every answer-claim metric."""
    entails = pl.col("verdict") == ENTAILED
    per_claim = (
        checks.join(context.select(_ITEM, _PASSAGE, "relevant"), on=[_ITEM, _PASSAGE], how="left")
        .group_by(_ITEM, _CLAIM)
        .agg(
            entails.any().alias("in_context"),
            (pl.col("verdict") == CONTRADICTED).any().alias("any_contradicts"),
            (entails & pl.col("relevant")).any().alias("in_relevant"),
            (entails & ~pl.col("relevant")).any().alias("in_irrelevant"),
        )
    )
    flags = ["in_context", "any_contradicts", "in_relevant", "in_irrelevant"]
    claims = answers.join(per_claim, on=[_ITEM, _CLAIM], how="left").with_columns(
        pl.col(flags).fill_null(False)
    )
    ref = pl.col("reference_verdict")
    correct = ref == ENTAILED
    ref_c, ref_u = ref == CONTRADICTED, ref == UNSUPPORTED
    incorrect = ~correct
    in_ctx = pl.col("in_context")
    ctx_c = ~in_ctx & pl.col("any_contradicts")
    ctx_u = ~in_ctx & ~pl.col("any_contradicts")
    in_rel = pl.col("in_relevant")
    in_irr = pl.col("in_irrelevant") & ~in_rel
    counts = {
        "a_correct": correct,
        "a_ref_c": ref_c,
        "a_ref_u": ref_u,
        "a_in_ctx": in_ctx,
        "a_ctx_c": ctx_c,
        "a_ctx_u": ctx_u,
        "a_ns_rel_c": ref_c & in_rel,
        "a_ns_rel_u": ref_u & in_rel,
        "a_ns_irr_c": ref_c & in_irr,
        "a_ns_irr_u": ref_u & in_irr,
        "a_hall_ref_c": ref_c & ~in_ctx,
        "a_hall_ref_u": ref_u & ~in_ctx,
        "a_hall_ctx_c": incorrect & ctx_c,
        "a_hall_ctx_u": incorrect & ctx_u,
        "a_sk_ctx_c": correct & ctx_c,
        "a_sk_ctx_u": correct & ctx_u,
    }
    return claims.group_by(_ITEM).agg(
        pl.len().alias("n_answer_claims"),
        *(expr.sum().alias(name) for name, expr in counts.items()),
    )


def _reference_counts(references: pl.DataFrame, checks: pl.DataFrame) -> pl.DataFrame:
    """Per item: reference claims and the counts behind the recall and utilisation metrics."""
    per_claim = checks.group_by(_ITEM, _CLAIM).agg(
        (pl.col("verdict") == ENTAILED).any().alias("in_context"),
        (pl.col("verdict") == CONTRADICTED).any().alias("any_contradicts"),
    )
    claims = references.join(per_claim, on=[_ITEM, _CLAIM], how="left").with_columns(
        pl.col("in_context", "any_contradicts").fill_null(False)
    )
    ans = pl.col("answer_verdict")
    in_ctx = pl.col("in_context")
    counts = {
        "n_reference_claims_in_context": in_ctx,
        "r_stated": ans == ENTAILED,
        "r_ans_c": ans == CONTRADICTED,
        "r_ans_u": ans == UNSUPPORTED,
        "r_ctx_c": ~in_ctx & pl.col("any_contradicts"),
        "r_ctx_u": ~in_ctx & ~pl.col("any_contradicts"),
        "r_used": in_ctx & (ans == ENTAILED),
        "r_unused_c": in_ctx & (ans == CONTRADICTED),
        "r_unused_u": in_ctx & (ans == UNSUPPORTED),
    }
    return claims.group_by(_ITEM).agg(
        pl.len().alias("n_reference_claims"),
        *(expr.sum().alias(name) for name, expr in counts.items()),
    )


def _passage_counts(context: pl.DataFrame) -> pl.DataFrame:
    """Per item: passages sent, relevant ones and useful ones (entail a reference claim)."""
    return context.group_by(_ITEM).agg(
        pl.len().alias("n_passages"),
        pl.col("relevant").sum().alias("n_relevant_passages"),
        pl.col("useful").sum().alias("p_useful"),
    )


def _ratio(numerator: str, denominator: str) -> pl.Expr:
    """``numerator / denominator`` as Float64, null when the denominator is 0."""
    return (
        pl.when(pl.col(denominator) > 0)
        .then(pl.col(numerator).cast(pl.Float64) / pl.col(denominator).cast(pl.Float64))
        .otherwise(None)
    )


def _metric_expressions(relevance: Relevance) -> list[pl.Expr]:
    """The expressions for :data:`METRICS`, in order, over the per-item count columns."""
    a, r = "n_answer_claims", "n_reference_claims"
    precision, recall = _ratio("a_correct", a), _ratio("r_stated", r)
    has_references = pl.col(r) > 0
    f1 = (
        pl.when(precision.is_null() | recall.is_null())
        .then(None)
        .when((precision + recall) == 0)
        .then(0.0)
        .otherwise(2 * precision * recall / (precision + recall))
    )
    noise = {
        "noise_sensitivity_in_relevant": ("a_ns_rel_c", "a_ns_rel_u"),
        "noise_sensitivity_in_irrelevant": ("a_ns_irr_c", "a_ns_irr_u"),
    }
    noise_exprs: list[pl.Expr] = []
    for name, (contradicted, unsupported) in noise.items():
        parts = {
            name: (pl.col(contradicted) + pl.col(unsupported)) / pl.col(a).cast(pl.Float64),
            f"{name}_ref_contradicted": _ratio(contradicted, a),
            f"{name}_ref_unsupported": _ratio(unsupported, a),
        }
        for label, expr in parts.items():
            defined = pl.col(a) > 0
            if relevance == "reference_claims":
                defined = defined & has_references
            noise_exprs.append(pl.when(defined).then(expr).otherwise(None).alias(label))
    exprs = [
        precision.alias("precision"),
        _ratio("a_ref_c", a).alias("incorrect_ref_contradicted"),
        _ratio("a_ref_u", a).alias("incorrect_ref_unsupported"),
        recall.alias("claim_recall"),
        _ratio("r_ans_c", r).alias("claim_missed_ans_contradicted"),
        _ratio("r_ans_u", r).alias("claim_missed_ans_unsupported"),
        f1.alias("f1"),
        _ratio("n_reference_claims_in_context", r).alias("context_claim_recall"),
        _ratio("r_ctx_c", r).alias("context_claim_missed_ctx_contradicted"),
        _ratio("r_ctx_u", r).alias("context_claim_missed_ctx_unsupported"),
        pl.when(has_references)
        .then(_ratio("p_useful", "n_passages"))
        .otherwise(None)
        .alias("context_precision"),
        _ratio("r_used", "n_reference_claims_in_context").alias("context_utilisation"),
        _ratio("r_unused_c", "n_reference_claims_in_context").alias(
            "context_unused_ans_contradicted"
        ),
        _ratio("r_unused_u", "n_reference_claims_in_context").alias(
            "context_unused_ans_unsupported"
        ),
        *noise_exprs,
        _ratio_sum(("a_hall_ref_c", "a_hall_ref_u"), a).alias("hallucination"),
        _ratio("a_hall_ref_c", a).alias("hallucination_ref_contradicted"),
        _ratio("a_hall_ref_u", a).alias("hallucination_ref_unsupported"),
        _ratio("a_hall_ctx_c", a).alias("hallucination_ctx_contradicted"),
        _ratio("a_hall_ctx_u", a).alias("hallucination_ctx_unsupported"),
        _ratio_sum(("a_sk_ctx_c", "a_sk_ctx_u"), a).alias("self_knowledge"),
        _ratio("a_sk_ctx_c", a).alias("self_knowledge_ctx_contradicted"),
        _ratio("a_sk_ctx_u", a).alias("self_knowledge_ctx_unsupported"),
        _ratio("a_in_ctx", a).alias("faithfulness"),
        _ratio("a_ctx_c", a).alias("unfaithful_ctx_contradicted"),
        _ratio("a_ctx_u", a).alias("unfaithful_ctx_unsupported"),
    ]
    names = [e.meta.output_name() for e in exprs]
    if tuple(names) != METRICS:
        raise AssertionError(f"metric expressions out of step with METRICS: {names}")
    return exprs


def _ratio_sum(numerators: tuple[str, ...], denominator: str) -> pl.Expr:
    """``sum(numerators) / denominator`` as Float64, null when the denominator is 0."""
    total = pl.sum_horizontal(*(pl.col(c) for c in numerators)).cast(pl.Float64)
    return (
        pl.when(pl.col(denominator) > 0)
        .then(total / pl.col(denominator).cast(pl.Float64))
        .otherwise(None)
    )


def _require(frame: pl.DataFrame, name: str, columns: Sequence[str]) -> None:
    """Raise ``ValueError`` unless ``frame`` is a Polars frame with ``columns``."""
    if not isinstance(frame, pl.DataFrame):
        raise ValueError(f"{name} must be a polars DataFrame, got {type(frame).__name__}")
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{name} lacks columns {missing} (has {frame.columns})")


def _ids(frame: pl.DataFrame, name: str, id_columns: Sequence[str]) -> pl.DataFrame:
    """``frame`` with its id columns as strings; null ids raise ``ValueError``."""
    frame = frame.with_columns(pl.col(c).cast(pl.String) for c in id_columns)
    for column in id_columns:
        if frame.get_column(column).null_count():
            raise ValueError(f"{name}.{column} has null values")
    return frame


def _check_verdicts(frame: pl.DataFrame, name: str, column: str) -> None:
    """Every value of ``column`` must be ENTAILED, CONTRADICTED or UNSUPPORTED."""
    values = frame.get_column(column)
    if values.null_count():
        raise ValueError(f"{name}.{column} has null verdicts")
    unknown = sorted(set(values.cast(pl.String).to_list()) - set(VERDICTS))
    if unknown:
        raise ValueError(f"{name}.{column} has unknown verdicts {unknown}; expected {VERDICTS}")


def _check_unique(frame: pl.DataFrame, name: str, key: Sequence[str]) -> None:
    """Raise ``ValueError`` if ``key`` repeats in ``frame``."""
    duplicated = frame.select(key).filter(frame.select(key).is_duplicated())
    if duplicated.height:
        raise ValueError(f"{name} repeats {list(key)}: {duplicated.unique().head(3).rows()}")


def _claims_frame(frame: pl.DataFrame, name: str, verdict_column: str) -> pl.DataFrame:
    """The validated claims frame: item_id, claim_id and its verdict column."""
    _require(frame, name, [_ITEM, _CLAIM, verdict_column])
    frame = _ids(frame.select(_ITEM, _CLAIM, verdict_column), name, [_ITEM, _CLAIM])
    frame = frame.with_columns(pl.col(verdict_column).cast(pl.String))
    _check_verdicts(frame, name, verdict_column)
    _check_unique(frame, name, [_ITEM, _CLAIM])
    return frame


def _passages_frame(frame: pl.DataFrame) -> pl.DataFrame:
    """The validated passages frame: item_id, passage_id, gold_grade (Int64, nullable)."""
    _require(frame, "passages", [_ITEM, _PASSAGE, "gold_grade"])
    frame = _ids(frame.select(_ITEM, _PASSAGE, "gold_grade"), "passages", [_ITEM, _PASSAGE])
    frame = frame.with_columns(pl.col("gold_grade").cast(pl.Int64))
    _check_unique(frame, "passages", [_ITEM, _PASSAGE])
    return frame


def _verdicts_frame(frame: pl.DataFrame, name: str) -> pl.DataFrame:
    """The validated claim-against-passage frame: item_id, claim_id, passage_id, verdict."""
    key = [_ITEM, _CLAIM, _PASSAGE]
    _require(frame, name, [*key, "verdict"])
    frame = _ids(frame.select(*key, "verdict"), name, key)
    frame = frame.with_columns(pl.col("verdict").cast(pl.String))
    _check_verdicts(frame, name, "verdict")
    _check_unique(frame, name, key)
    return frame


def _check_references(
    checks: pl.DataFrame,
    claims: pl.DataFrame,
    context: pl.DataFrame,
    name: str,
    claims_name: str,
) -> None:
    """Every verdict row must name a known claim and a passage sent for the same item."""
    unknown_claims = checks.join(claims, on=[_ITEM, _CLAIM], how="anti")
    if unknown_claims.height:
        sample = unknown_claims.select(_ITEM, _CLAIM).head(3).rows()
        raise ValueError(f"{name} names claims not in {claims_name}: {sample}")
    unknown_passages = checks.join(context, on=[_ITEM, _PASSAGE], how="anti")
    if unknown_passages.height:
        sample = unknown_passages.select(_ITEM, _PASSAGE).head(3).rows()
        raise ValueError(f"{name} names passages not in passages: {sample}")


def _item_frame(
    items: Sequence[str] | None,
    answers: pl.DataFrame,
    references: pl.DataFrame,
    context: pl.DataFrame,
) -> pl.DataFrame:
    """The items to report: the given ``items`` in order, or every item seen, sorted."""
    seen = pl.concat([f.select(_ITEM) for f in (answers, references, context)]).unique()
    if items is None:
        return seen.sort(_ITEM)
    wanted = pl.DataFrame({_ITEM: [str(i) for i in items]}, schema={_ITEM: pl.String})
    _check_unique(wanted, "items", [_ITEM])
    extra = seen.join(wanted, on=_ITEM, how="anti")
    if extra.height:
        raise ValueError(f"frames hold items not in items: {sorted(extra.get_column(_ITEM))[:3]}")
    return wanted
