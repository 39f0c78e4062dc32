"""Generation measures: per-item outcomes, then rates with intervals per scope.

Per item (``item_outcomes``):
- ``correct``: on an answerable item, answered and every ``must_mention`` string present
  (case-insensitive); when an item has no ``must_mention``, answered with SQuAD token F1 >= 0.5
  against a reference answer; unknown (null, left out of the rates) when it has neither. On a
  no-answer item, correct means refused.
- ``exact_match`` / ``token_f1``: the official SQuAD 2.0 definitions (lowercase, punctuation and
  the articles a/an/the removed, whitespace collapsed; the maximum over reference answers; a
  no-answer item scores 1 only for an empty prediction). A refusal predicts the empty string;
  citation markers ``[id]`` naming a passage of the context sent (or a cited id) are removed
  before scoring, other bracketed text is kept. An answerable item without reference answers
  has no SQuAD score (null) rather than the no-answer case's 1.
- ``context_sufficient``: a gold passage at or above the relevance level was in the context sent.
- ``confident_wrong``: answered and not correct.

Rates (``summarise``), each with ``n`` (its denominator) and an interval:
- ``faithfulness``: mean over judged answered items of ENTAILED claims / all claims (Ragas'
  definition, claims judged against the context sent); bootstrap interval.
- ``contradicted_claim_rate`` / ``unsupported_claim_rate``: CONTRADICTED (intrinsic) or
  UNSUPPORTED (extrinsic) claims / all judged claims; Wilson.
- ``citation_validity``: answered items whose cited ids are all in the context sent / answered.
- ``citation_support``: citations whose passage entails the claim they are attached to / citations.
- ``answer_relevance``: answered items judged relevant / answered items that have a judgement.
- ``answer_correct_rate`` and ``exact_match`` / ``token_f1`` means over the items in scope.
- ``confident_wrong_rate``: answered and incorrect / items in scope.
- ``false_refusal_rate``: answerable refused / answerable.
- ``correct_refusal_rate``: no-answer refused / no-answer; ``refusal_precision``: refusals on
  no-answer items / all refusals. The no-answer strata are reported apart, never in the headline.

Guardrails, each measured on its own (``guardrail_metrics``, rates defined there): the input
check's block rates on ``prompt_injection`` and ``out_of_scope`` items and its false blocks on
answerable items; the evidence check's refusals of no-answer items and false refusals of
answerable items that passed the input check; the citation check's rejections among answers.

System errors (``lib.systems.calls``): an item whose call to the system under test failed
(``refusal_reason`` ``system_error:<cause>``) is neither refused, wrong nor right: it is left out
of every rate above and counted in the ``operations`` scope instead (``operations_metrics``:
system errors, requests, retries, latency percentiles, tokens and cost, from ``system_calls``).
"""

import math
import re
import string
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from rag_eval_pipeline.lib.judges.protocol import (
    CONTRADICTED,
    ENTAILED,
    JUDGE_ERROR,
    UNSUPPORTED,
    VERDICTS,
)
from rag_eval_pipeline.lib.metrics.statistics import (
    bootstrap_mean_interval,
    mean_interval_method,
    wilson_interval,
)
from rag_eval_pipeline.lib.systems import guardrails
from rag_eval_pipeline.lib.systems.calls import OK, SYSTEM_ERROR, is_system_error

PROPORTION = "proportion"
MEAN = "mean"

CITATION_MARK = re.compile(r"\s*\[[^\[\]\s]+\]")
ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
PUNCTUATION_DELETION = str.maketrans("", "", string.punctuation)

METRIC_ROW_SCHEMA = {
    "scope": pl.String,
    "scope_value": pl.String,
    "metric": pl.String,
    "value": pl.Float64,
    "ci_low": pl.Float64,
    "ci_high": pl.Float64,
    "n": pl.Int64,
    "interval_method": pl.String,
}
OUTCOME_SCHEMA = {
    "item_id": pl.String,
    "stratum": pl.String,
    "language": pl.String,
    "answerable": pl.Boolean,
    "refused": pl.Boolean,
    "correct": pl.Boolean,
    "exact_match": pl.Float64,
    "token_f1": pl.Float64,
    "context_sufficient": pl.Boolean,
    "confident_wrong": pl.Boolean,
    "citation_valid": pl.Boolean,
    "best_score": pl.Float64,
}


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lowercase, drop punctuation and articles, collapse whitespace.

    Punctuation is ``string.punctuation``, as in the official script, deleted in one
    ``str.translate`` pass rather than character by character (the same result, faster).
    """
    text = text.lower().translate(PUNCTUATION_DELETION)
    return " ".join(ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, references: Sequence[str]) -> float:
    """SQuAD exact match, maximum over references; no references means the no-answer case.

    As in the official script, a reference that normalises to nothing is dropped, and an item
    left without references is scored against the empty answer."""
    golds = [gold for gold in map(normalize_answer, references) if gold] or [""]
    predicted = normalize_answer(prediction)
    return max(float(predicted == gold) for gold in golds)


def token_f1(prediction: str, references: Sequence[str]) -> float:
    """SQuAD token F1, maximum over references; an empty side scores 1 only if both are empty.

    Tokens are the whitespace-separated words of the normalised texts; overlap counts shared
    tokens with multiplicity (the official ``Counter`` intersection)."""
    golds = [gold.split() for gold in map(normalize_answer, references) if gold] or [[]]
    predicted = normalize_answer(prediction).split()
    best = 0.0
    for gold in golds:
        if not predicted or not gold:
            best = max(best, float(predicted == gold))
            continue
        common = sum((Counter(predicted) & Counter(gold)).values())
        if common == 0:
            continue
        precision, recall = common / len(predicted), common / len(gold)
        best = max(best, 2 * precision * recall / (precision + recall))
    return best


def strip_citations(answer: str) -> str:
    return CITATION_MARK.sub("", answer).strip()


def item_outcomes(
    items: pl.DataFrame,
    responses: pl.DataFrame,
    gold: pl.DataFrame,
    *,
    rel_level: int = 2,
) -> pl.DataFrame:
    """One row per item with the outcome columns of ``OUTCOME_SCHEMA``.

    ``items``: golden items; ``responses``: ``item_id, refused, answer, context_ids,
    citation_valid, best_score`` (and ``cited_ids``, ``refusal_reason`` when known); ``gold``:
    ``item_id, passage_id, grade``. Items whose response records a system error are left out.
    """
    if "refusal_reason" in responses.columns:
        failed = responses.filter(is_system_error(pl.col("refusal_reason"))).select("item_id")
        items = items.join(failed, on="item_id", how="anti")
        responses = responses.join(failed, on="item_id", how="anti")
    relevant = (
        gold.filter(pl.col("grade") >= rel_level)
        .group_by("item_id")
        .agg(pl.col("passage_id").alias("relevant_ids"))
    )
    joined = items.join(responses, on="item_id", how="left").join(
        relevant, on="item_id", how="left"
    )
    rows = []
    for row in joined.iter_rows(named=True):
        refused = bool(row["refused"]) if row["refused"] is not None else True
        # Only markers naming a passage the answer could cite are citations: SQuAD answers such
        # as "Z[i]" or "wid[en]" keep their brackets, as the official script scores them.
        citable = set(row["context_ids"] or []) | set(row.get("cited_ids") or [])
        prediction = (
            ""
            if refused
            else CITATION_MARK.sub(
                lambda mark, ids=citable: (
                    "" if mark.group(0).strip()[1:-1] in ids else mark.group(0)
                ),
                row["answer"] or "",
            ).strip()
        )
        references = row["reference_answers"] if row["answerable"] else []
        # An answerable item without reference answers has no SQuAD score (not a no-answer 1.0).
        scorable = not row["answerable"] or bool(references)
        em = exact_match(prediction, references) if scorable else None
        f1 = token_f1(prediction, references) if scorable else None
        if row["answerable"]:
            mentions = row["must_mention"] or []
            lowered = prediction.lower()
            if mentions:
                correct = not refused and all(m.lower() in lowered for m in mentions)
            elif f1 is not None:
                correct = not refused and f1 >= 0.5
            else:
                correct = None
        else:
            correct = refused
        context = set(row["context_ids"] or [])
        sufficient = bool(context & set(row["relevant_ids"] or []))
        rows.append(
            {
                "item_id": row["item_id"],
                "stratum": row["stratum"],
                "language": row["language"],
                "answerable": row["answerable"],
                "refused": refused,
                "correct": correct,
                "exact_match": em,
                "token_f1": f1,
                "context_sufficient": sufficient,
                "confident_wrong": (not refused) and correct is False,
                "citation_valid": row["citation_valid"],
                "best_score": row["best_score"],
            }
        )
    return pl.DataFrame(rows, schema=OUTCOME_SCHEMA)


def _proportion(metric: str, successes: int, n: int) -> dict:
    low, high = wilson_interval(successes, n)
    return {
        "metric": metric,
        "value": successes / n if n else None,
        "ci_low": low,
        "ci_high": high,
        "n": n,
        "interval_method": "wilson95",
    }


def _mean(metric: str, values: np.ndarray, seed: int) -> dict:
    low, high = bootstrap_mean_interval(values, seed=seed)
    return {
        "metric": metric,
        "value": float(values.mean()) if values.size else None,
        "ci_low": low,
        "ci_high": high,
        "n": int(values.size),
        "interval_method": mean_interval_method(values),
    }


def judged_items(verdicts: pl.DataFrame) -> pl.DataFrame:
    """Per judged item: claim counts by verdict and citation support counts.

    ``JUDGE_ERROR`` rows (a claim or a split the judge could not judge) are counted apart in
    ``n_judge_errors`` and left out of ``n_claims``; a citation whose check failed is left out of
    ``n_citations``. Items are in id order, so a seeded bootstrap over them is reproducible.
    """
    judged = pl.col("verdict").is_in(list(VERDICTS))
    return (
        verdicts.group_by("item_id")
        .agg(
            judged.sum().alias("n_claims"),
            (pl.col("verdict") == ENTAILED).sum().alias("n_entailed"),
            (pl.col("verdict") == CONTRADICTED).sum().alias("n_contradicted"),
            (pl.col("verdict") == UNSUPPORTED).sum().alias("n_unsupported"),
            (pl.col("verdict") == JUDGE_ERROR).sum().alias("n_judge_errors"),
            pl.col("citation_supported").is_not_null().sum().alias("n_citations"),
            pl.col("citation_supported").fill_null(False).sum().alias("n_citations_supported"),
        )
        .sort("item_id")
    )


@dataclass(frozen=True)
class ScopeItems:
    """The items of one scope, split the ways the measures need them."""

    outcomes: pl.DataFrame
    sampled: pl.DataFrame | None

    @classmethod
    def of(cls, outcomes: pl.DataFrame, judged: pl.DataFrame | None) -> "ScopeItems":
        sampled = None
        if judged is not None and judged.height:
            answered = outcomes.filter(~pl.col("refused")).select("item_id")
            sampled = judged.join(answered, on="item_id", how="semi")
        return cls(outcomes, sampled)

    @property
    def answerable(self) -> pl.DataFrame:
        return self.outcomes.filter(pl.col("answerable"))

    @property
    def no_answer(self) -> pl.DataFrame:
        return self.outcomes.filter(~pl.col("answerable"))

    @property
    def answered(self) -> pl.DataFrame:
        return self.outcomes.filter(~pl.col("refused"))

    @property
    def refused(self) -> pl.DataFrame:
        return self.outcomes.filter(pl.col("refused"))


Counts = tuple[int, int]


@dataclass(frozen=True)
class GenerationMeasure:
    """One generation measure: a proportion (successes, n; Wilson interval) or a mean over
    items (values; seeded bootstrap interval). ``compute`` returns ``None`` when the scope has
    nothing it applies to; a measure with ``n = 0`` is left out rather than reported as 0."""

    name: str
    kind: str
    compute: Callable[[ScopeItems], Counts | np.ndarray | None]
    needs_judge: bool = False


REGISTRY: dict[str, GenerationMeasure] = {}


def generation_measure(name: str, kind: str, *, needs_judge: bool = False):
    """Register a measure under ``name`` (the order of registration is the order of rows)."""

    def register(compute: Callable[[ScopeItems], Counts | np.ndarray | None]):
        REGISTRY[name] = GenerationMeasure(name, kind, compute, needs_judge)
        return compute

    return register


@generation_measure("faithfulness", MEAN, needs_judge=True)
def faithfulness(scope: ScopeItems) -> np.ndarray:
    """Mean over judged answered items with at least one judged claim of ENTAILED / judged claims
    (Ragas' definition; claims judged against the context sent)."""
    with_claims = scope.sampled.filter(pl.col("n_claims") > 0)
    return (with_claims["n_entailed"] / with_claims["n_claims"]).to_numpy()


@generation_measure("contradicted_claim_rate", PROPORTION, needs_judge=True)
def contradicted_claim_rate(scope: ScopeItems) -> Counts:
    """CONTRADICTED (intrinsic errors) / judged claims."""
    return int(scope.sampled["n_contradicted"].sum()), int(scope.sampled["n_claims"].sum())


@generation_measure("unsupported_claim_rate", PROPORTION, needs_judge=True)
def unsupported_claim_rate(scope: ScopeItems) -> Counts:
    """UNSUPPORTED (extrinsic errors) / judged claims."""
    return int(scope.sampled["n_unsupported"].sum()), int(scope.sampled["n_claims"].sum())


@generation_measure("judge_error_rate", PROPORTION, needs_judge=True)
def judge_error_rate(scope: ScopeItems) -> Counts:
    """Claims (and claim splits) the judge failed on (``JUDGE_ERROR``) / claims judged or failed:
    shown beside the judge-based rates, which leave these claims out."""
    errors = int(scope.sampled["n_judge_errors"].sum())
    return errors, int(scope.sampled["n_claims"].sum()) + errors


@generation_measure("citation_support", PROPORTION, needs_judge=True)
def citation_support(scope: ScopeItems) -> Counts:
    """Cited claims whose cited passages entail them / cited claims judged."""
    return (
        int(scope.sampled["n_citations_supported"].sum()),
        int(scope.sampled["n_citations"].sum()),
    )


@generation_measure("answer_relevance", PROPORTION, needs_judge=True)
def answer_relevance(scope: ScopeItems) -> Counts | None:
    """Answered items judged relevant / answered items with a relevance judgement (only for a
    judge that gives one: a boolean ``relevant`` per judged item)."""
    if "relevant" not in scope.sampled.columns:
        return None
    rated = scope.sampled.filter(pl.col("relevant").is_not_null())
    return int(rated["relevant"].sum()), rated.height


@generation_measure("citation_validity", PROPORTION)
def citation_validity(scope: ScopeItems) -> Counts:
    """Answered items citing only ids of the context sent (and at least one) / answered."""
    valid = scope.answered.filter(pl.col("citation_valid").is_not_null())
    return int(valid["citation_valid"].sum()), valid.height


@generation_measure("answer_correct_rate", PROPORTION)
def answer_correct_rate(scope: ScopeItems) -> Counts | None:
    """Correct / answerable items whose correctness is known (must_mention or a reference)."""
    if not scope.answerable.height:
        return None
    known = scope.answerable.filter(pl.col("correct").is_not_null())
    return int(known["correct"].sum()), known.height


@generation_measure("exact_match", MEAN)
def exact_match_mean(scope: ScopeItems) -> np.ndarray | None:
    """Mean SQuAD exact match over answerable items with reference answers."""
    if not scope.answerable.height:
        return None
    return scope.answerable["exact_match"].drop_nulls().to_numpy()


@generation_measure("token_f1", MEAN)
def token_f1_mean(scope: ScopeItems) -> np.ndarray | None:
    """Mean SQuAD token F1 over answerable items with reference answers."""
    if not scope.answerable.height:
        return None
    return scope.answerable["token_f1"].drop_nulls().to_numpy()


@generation_measure("false_refusal_rate", PROPORTION)
def false_refusal_rate(scope: ScopeItems) -> Counts | None:
    """Answerable items refused / answerable items."""
    if not scope.answerable.height:
        return None
    return int(scope.answerable["refused"].sum()), scope.answerable.height


@generation_measure("correct_refusal_rate", PROPORTION)
def correct_refusal_rate(scope: ScopeItems) -> Counts | None:
    """No-answer items refused / no-answer items."""
    if not scope.no_answer.height:
        return None
    return int(scope.no_answer["refused"].sum()), scope.no_answer.height


@generation_measure("refusal_precision", PROPORTION)
def refusal_precision(scope: ScopeItems) -> Counts | None:
    """Refusals of no-answer items / all refusals (only in a scope holding both kinds)."""
    refused = scope.refused
    if not (refused.height and scope.answerable.height and scope.no_answer.height):
        return None
    return int((~refused["answerable"]).sum()), refused.height


@generation_measure("confident_wrong_rate", PROPORTION)
def confident_wrong_rate(scope: ScopeItems) -> Counts:
    """Answered and not correct / items in scope."""
    return int(scope.outcomes["confident_wrong"].sum()), scope.outcomes.height


def summarise(
    outcomes: pl.DataFrame, judged: pl.DataFrame | None = None, *, seed: int = 20261001
) -> list[dict]:
    """Every registered measure over the items of ``outcomes`` (one scope), each with its
    interval and ``n``. ``judged`` (from ``judged_items``) restricts the claim-level measures to
    the sampled items; without it they are left out. Measures with an empty denominator are
    left out."""
    scope = ScopeItems.of(outcomes, judged)
    rows = []
    for spec in REGISTRY.values():
        if spec.needs_judge and scope.sampled is None:
            continue
        computed = spec.compute(scope)
        if computed is None:
            continue
        row = (
            _proportion(spec.name, *computed)
            if spec.kind == PROPORTION
            else _mean(spec.name, computed, seed)
        )
        if row["n"]:
            rows.append(row)
    return rows


# SQuAD's official figures over every item (answerable and no-answer), from the per-item column.
SQUAD_MEASURES = {"squad_exact_match": "exact_match", "squad_f1": "token_f1"}


def scoped_summary(
    outcomes: pl.DataFrame, judged: pl.DataFrame | None = None, *, seed: int = 20261001
) -> pl.DataFrame:
    """``summarise`` per scope: the headline (answerable items), the no-answer items together,
    every stratum, every language (answerable items), and SQuAD's official mix of both."""
    scopes: list[tuple[str, str, pl.DataFrame]] = [
        ("overall", "answerable", outcomes.filter(pl.col("answerable"))),
        ("overall", "no_answer", outcomes.filter(~pl.col("answerable"))),
        ("overall", "all_items", outcomes),
    ]
    for stratum in sorted(outcomes["stratum"].unique().to_list()):
        scopes.append(("stratum", stratum, outcomes.filter(pl.col("stratum") == stratum)))
    for language in sorted(outcomes["language"].unique().to_list()):
        scopes.append(
            (
                "language",
                language,
                outcomes.filter((pl.col("language") == language) & pl.col("answerable")),
            )
        )
    rows = []
    for scope, value, subset in scopes:
        if not subset.height:
            continue
        for metric in summarise(subset, judged, seed=seed):
            if (
                scope == "overall"
                and value == "all_items"
                and metric["metric"]
                not in (
                    "exact_match_all",
                    "refusal_precision",
                    "confident_wrong_rate",
                )
            ):
                continue
            rows.append({"scope": scope, "scope_value": value, **metric})
    squad = outcomes
    for name, column in SQUAD_MEASURES.items():
        rows.append(
            {
                "scope": "overall",
                "scope_value": "all_items",
                **_mean(name, squad[column].to_numpy(), seed),
            }
        )
    return pl.DataFrame(rows, schema=METRIC_ROW_SCHEMA)


def sufficiency_table(outcomes: pl.DataFrame) -> pl.DataFrame:
    """The 2x2 of context sufficiency x answer correctness on answerable items (all four cells)."""
    cells = pl.DataFrame(
        {
            "context_sufficient": [True, True, False, False],
            "answer_correct": [True, False, True, False],
        }
    )
    counts = (
        outcomes.filter(pl.col("answerable"))
        .group_by(pl.col("context_sufficient"), pl.col("correct").alias("answer_correct"))
        .agg(pl.len().cast(pl.Int64).alias("count"))
    )
    return cells.join(counts, on=["context_sufficient", "answer_correct"], how="left").with_columns(
        pl.col("count").fill_null(0)
    )


# The recommendation's cap on unanswerable questions answered (the confident-wrong target).
MAX_UNANSWERABLE_ANSWERED_RATE = 0.05


def allowed_unanswerable_answered(unanswerable_items: int, rate: float) -> int:
    """The most unanswerable questions a recommended threshold may answer: ``floor(rate * n)``
    (zero on fewer than 20 unanswerable items at 5%)."""
    return math.floor(rate * unanswerable_items)


def abstention_sweep(
    best_scores: pl.DataFrame,
    thresholds: Sequence[float],
    *,
    max_unanswerable_answered_rate: float = MAX_UNANSWERABLE_ANSWERED_RATE,
) -> tuple[pl.DataFrame, float | None]:
    """Both error counts of the evidence threshold at each candidate threshold.

    An item is answered at threshold t when its best score is >= t (no score: never answered)
    and no other guardrail refused it (optional boolean column ``refused_otherwise``).
    ``best_scores`` has ``answerable`` and ``best_score``.

    Recommendation rule: among thresholds that answer at most
    ``floor(max_unanswerable_answered_rate * unanswerable items)`` unanswerable questions (5% by
    default, the confident-wrong target; zero on small sets), the one with the fewest answerable
    questions refused, then the lowest threshold. When no candidate meets the cap, the one with
    the fewest unanswerable questions answered.
    """
    frame = best_scores
    if "refused_otherwise" not in frame.columns:
        frame = frame.with_columns(refused_otherwise=pl.lit(False))
    rows = []
    for threshold in sorted({float(t) for t in thresholds}):
        answered = (
            pl.col("best_score").is_not_null()
            & (pl.col("best_score") >= threshold)
            & ~pl.col("refused_otherwise")
        )
        counts = frame.select(
            (answered & ~pl.col("answerable")).sum().alias("unanswerable_answered"),
            (~answered & pl.col("answerable")).sum().alias("answerable_refused"),
        ).row(0)
        rows.append(
            {
                "threshold": threshold,
                "unanswerable_answered": int(counts[0]),
                "answerable_refused": int(counts[1]),
            }
        )
    sweep = pl.DataFrame(
        rows,
        schema={
            "threshold": pl.Float64,
            "unanswerable_answered": pl.Int64,
            "answerable_refused": pl.Int64,
        },
    )
    if not sweep.height:
        return sweep.with_columns(recommended=pl.lit(False)), None
    allowed = allowed_unanswerable_answered(
        int((~frame["answerable"]).sum()), max_unanswerable_answered_rate
    )
    eligible = sweep.filter(pl.col("unanswerable_answered") <= allowed)
    if eligible.height:
        best = eligible.sort("answerable_refused", "threshold").row(0, named=True)
    else:
        best = sweep.sort("unanswerable_answered", "answerable_refused", "threshold").row(
            0, named=True
        )
    recommended = best["threshold"]
    return sweep.with_columns(recommended=pl.col("threshold") == recommended), recommended


def sweep_thresholds(best_scores: Sequence[float | None], points: int = 60) -> list[float]:
    """Candidate thresholds: 0, every observed best score (thinned to ``points`` quantiles) and
    one just above the highest, where everything is refused."""
    observed = sorted({float(s) for s in best_scores if s is not None})
    if len(observed) > points:
        positions = np.linspace(0, len(observed) - 1, points).round().astype(int)
        observed = sorted({observed[i] for i in positions})
    return [0.0, *observed, (observed[-1] + 1e-3) if observed else 1.0]


def guardrail_rates() -> tuple[tuple[str, pl.Expr, pl.Expr], ...]:
    """Each guardrail rate of ``guardrail_metrics`` (defined there): its name, the items it is
    measured on and the items among them that count as successes, as row filters."""
    reason = pl.col("refusal_reason").fill_null("")
    blocked = pl.col("refused") & reason.str.starts_with("input_check:")
    by_evidence = pl.col("refused") & reason.str.starts_with("evidence_check:")
    by_citation = pl.col("refused") & reason.str.starts_with("citation_check:")
    answerable = pl.col("answerable")
    stratum = pl.col("stratum")
    return (
        (
            "input_check_override_blocked",
            stratum == "prompt_injection",
            pl.col("refused") & (reason == guardrails.PROMPT_OVERRIDE),
        ),
        (
            "input_check_out_of_scope_blocked",
            stratum == "out_of_scope",
            pl.col("refused") & (reason == guardrails.OUT_OF_SCOPE),
        ),
        ("input_check_false_block_rate", answerable, blocked),
        ("evidence_check_no_answer_refused", ~answerable & ~blocked, by_evidence),
        ("evidence_check_false_refusal_rate", answerable & ~blocked, by_evidence),
        ("citation_check_rejection_rate", ~pl.col("refused") | by_citation, by_citation),
    )


GUARDRAIL_METRICS = tuple(name for name, _, _ in guardrail_rates())


def guardrail_metrics(outcomes_with_reasons: pl.DataFrame) -> list[dict]:
    """How well each guardrail of the system did its own job, from the refusal reasons.

    ``outcomes_with_reasons`` has one row per item with ``stratum``, ``answerable``, ``refused``
    and ``refusal_reason`` (``generation_results.refusal_reason``: ``input_check:...``,
    ``evidence_check:...``, ``citation_check:...``; see ``lib.guardrails``). Each rate is a
    proportion with a Wilson 95% interval; ``n`` is its denominator, and a rate whose
    denominator is empty is left out. The guardrails run in order (input check, evidence
    check, answer, citation check), so each is measured on the items that reached it:

    - ``input_check_override_blocked``: ``prompt_injection`` items refused with
      ``input_check:prompt_override`` / ``prompt_injection`` items;
    - ``input_check_out_of_scope_blocked``: ``out_of_scope`` items refused with
      ``input_check:out_of_scope`` / ``out_of_scope`` items;
    - ``input_check_false_block_rate``: answerable items refused by any ``input_check:*`` /
      answerable items;
    - ``evidence_check_no_answer_refused``: no-answer items refused by ``evidence_check:*`` /
      no-answer items not refused by the input check;
    - ``evidence_check_false_refusal_rate``: answerable items refused by ``evidence_check:*`` /
      answerable items not refused by the input check;
    - ``citation_check_rejection_rate``: answers rejected by ``citation_check:*`` / answers
      given (items answered, plus those whose answer the citation check rejected).
    """
    rates = guardrail_rates()
    counts = outcomes_with_reasons.select(
        *(within.sum().alias(f"{name}:n") for name, within, _ in rates),
        *((within & success).sum().alias(f"{name}:k") for name, within, success in rates),
    ).row(0, named=True)
    metrics = [
        _proportion(name, int(counts[f"{name}:k"]), int(counts[f"{name}:n"]))
        for name, _, _ in rates
    ]
    return [m for m in metrics if m["n"]]


FIGURE = "figure"


@dataclass(frozen=True)
class OperationsMeasure:
    """One figure of how the calls went, over a run's ``system_calls``: a proportion
    (successes, n; Wilson interval) or a plain figure (value, n; no interval). ``compute``
    returns ``None`` when nothing it applies to was reported."""

    name: str
    kind: str
    compute: Callable[[pl.DataFrame], tuple[float, int] | None]


OPERATIONS: dict[str, OperationsMeasure] = {}


def operations_measure(name: str, kind: str = FIGURE):
    """Register an operations measure under ``name`` (registration order is row order)."""

    def register(compute: Callable[[pl.DataFrame], tuple[float, int] | None]):
        OPERATIONS[name] = OperationsMeasure(name, kind, compute)
        return compute

    return register


def _answered_latency(calls: pl.DataFrame) -> pl.Series:
    """Latency of the calls that gave a trace: a failed call's time says how it failed (a
    timeout, a reset), not how fast the system answers."""
    return calls.filter(pl.col("outcome") == OK)["latency_ms"].drop_nulls()


def _reported(calls: pl.DataFrame, column: str) -> pl.Series:
    return calls.filter(pl.col("outcome") == OK)[column].drop_nulls()


@operations_measure("system_errors")
def system_errors(calls: pl.DataFrame) -> tuple[float, int]:
    """Items whose call ended in a system error (n = items)."""
    return float((calls["outcome"] == SYSTEM_ERROR).sum()), calls.height


@operations_measure("system_error_rate", PROPORTION)
def system_error_rate(calls: pl.DataFrame) -> tuple[int, int]:
    """Items ending in a system error / items; Wilson interval."""
    return int((calls["outcome"] == SYSTEM_ERROR).sum()), calls.height


@operations_measure("requests")
def requests_made(calls: pl.DataFrame) -> tuple[float, int] | None:
    """Requests made, retries included (n = items with a recorded attempt count)."""
    attempts = calls["attempts"].drop_nulls()
    return (float(attempts.sum()), attempts.len()) if attempts.len() else None


@operations_measure("retries")
def retries_made(calls: pl.DataFrame) -> tuple[float, int] | None:
    """Requests beyond the first per item (n = items with a recorded attempt count)."""
    attempts = calls["attempts"].drop_nulls()
    return (float((attempts - 1).clip(0).sum()), attempts.len()) if attempts.len() else None


def _latency_quantile(calls: pl.DataFrame, quantile: float) -> tuple[float, int] | None:
    latency = _answered_latency(calls)
    if not latency.len():
        return None
    return float(latency.quantile(quantile, interpolation="linear")), latency.len()


def _usage(calls: pl.DataFrame, column: str, *, mean: bool) -> tuple[float, int] | None:
    values = _reported(calls, column)
    if not values.len():
        return None
    return float(values.mean() if mean else values.sum()), values.len()


@operations_measure("latency_p50_ms")
def latency_p50(calls: pl.DataFrame) -> tuple[float, int] | None:
    """Median latency of the answered calls in ms (linear interpolation between order
    statistics, numpy's default; n = answered items with a measured latency)."""
    return _latency_quantile(calls, 0.5)


@operations_measure("latency_p95_ms")
def latency_p95(calls: pl.DataFrame) -> tuple[float, int] | None:
    """95th percentile latency of the answered calls in ms (as ``latency_p50_ms``)."""
    return _latency_quantile(calls, 0.95)


@operations_measure("latency_max_ms")
def latency_max(calls: pl.DataFrame) -> tuple[float, int] | None:
    """Slowest answered call in ms."""
    return _latency_quantile(calls, 1.0)


@operations_measure("prompt_tokens_total")
def prompt_tokens_total(calls: pl.DataFrame) -> tuple[float, int] | None:
    """Prompt tokens the service reported (n = answered items reporting them)."""
    return _usage(calls, "prompt_tokens", mean=False)


@operations_measure("prompt_tokens_mean")
def prompt_tokens_mean(calls: pl.DataFrame) -> tuple[float, int] | None:
    """Mean prompt tokens per answered item reporting them."""
    return _usage(calls, "prompt_tokens", mean=True)


@operations_measure("completion_tokens_total")
def completion_tokens_total(calls: pl.DataFrame) -> tuple[float, int] | None:
    """Completion tokens the service reported (n = answered items reporting them)."""
    return _usage(calls, "completion_tokens", mean=False)


@operations_measure("completion_tokens_mean")
def completion_tokens_mean(calls: pl.DataFrame) -> tuple[float, int] | None:
    """Mean completion tokens per answered item reporting them."""
    return _usage(calls, "completion_tokens", mean=True)


@operations_measure("cost_total")
def cost_total(calls: pl.DataFrame) -> tuple[float, int] | None:
    """Cost the service reported, in its own unit (n = answered items reporting it)."""
    return _usage(calls, "cost", mean=False)


@operations_measure("cost_mean")
def cost_mean(calls: pl.DataFrame) -> tuple[float, int] | None:
    """Mean cost per answered item reporting it."""
    return _usage(calls, "cost", mean=True)


def operations_metrics(calls: pl.DataFrame) -> list[dict]:
    """Every registered operations measure over a run's ``system_calls`` (scope
    ``operations``, ``all_items``); measures with nothing reported are left out."""
    rows = []
    for spec in OPERATIONS.values():
        computed = spec.compute(calls) if calls.height else None
        if computed is None:
            continue
        if spec.kind == PROPORTION:
            row = _proportion(spec.name, *computed)
        else:
            value, n = computed
            row = {
                "metric": spec.name,
                "value": value,
                "ci_low": None,
                "ci_high": None,
                "n": n,
                "interval_method": "none",
            }
        if row["n"]:
            rows.append({"scope": "operations", "scope_value": "all_items", **row})
    return rows


@dataclass(frozen=True)
class GenerationTables:
    """A run's generation tables (rows without the run id) and the recommended threshold."""

    item_metrics: pl.DataFrame
    metrics: pl.DataFrame
    sufficiency: pl.DataFrame
    sweep: pl.DataFrame
    recommended_threshold: float | None

    def recommendation(self) -> dict | None:
        """The rule's pick as ``sql/summary.sql`` (``recommended_threshold``) reads it back from
        the warehouse: its two counts, the items it was chosen on and the fewest answerable items
        any threshold refuses; None when the sweep has no threshold."""
        if self.recommended_threshold is None:
            return None
        pick = self.sweep.filter(pl.col("recommended")).row(0, named=True)
        answerable = self.item_metrics["answerable"]
        return {
            "threshold": pick["threshold"],
            "unanswerable_answered": pick["unanswerable_answered"],
            "answerable_refused": pick["answerable_refused"],
            "unanswerable_items": int((~answerable).sum()),
            "answerable_items": int(answerable.sum()),
            "fewest_answerable_refused": int(self.sweep["answerable_refused"].min()),
        }


def generation_tables(
    items: pl.DataFrame,
    responses: pl.DataFrame,
    gold: pl.DataFrame,
    verdicts: pl.DataFrame,
    *,
    rel_level: int,
    seed: int,
    calls: pl.DataFrame | None = None,
) -> GenerationTables:
    """Every generation table of a run from its golden items, ``generation_results``, gold
    passages and the golden-source ``judge_verdicts``: per-item outcomes, the rates per scope
    (with the guardrails measured one by one), the sufficiency x correctness 2x2 and the
    abstention sweep with its recommended threshold; with the run's ``system_calls``, the
    ``operations`` figures too. Items that ended in a system error are in no rate."""
    outcomes = item_outcomes(items, responses, gold, rel_level=rel_level)
    table = scoped_summary(outcomes, judged_items(verdicts), seed=seed)
    guarded = outcomes.join(responses.select("item_id", "refusal_reason"), on="item_id")
    guardrail_rows = [
        {"scope": "guardrail", "scope_value": "all_items", **row}
        for row in guardrail_metrics(guarded)
    ]
    operations_rows = operations_metrics(calls) if calls is not None else []
    table = pl.concat(
        [
            table,
            pl.DataFrame(guardrail_rows, schema=table.schema),
            pl.DataFrame(operations_rows, schema=table.schema),
        ]
    )
    refused_otherwise = responses.select(
        "item_id",
        refused_otherwise=pl.col("refused")
        & ~pl.col("refusal_reason").fill_null("").str.starts_with("evidence_check"),
    )
    sweep, recommended = abstention_sweep(
        outcomes.join(refused_otherwise, on="item_id").select(
            "answerable", "best_score", "refused_otherwise"
        ),
        sweep_thresholds(outcomes["best_score"].to_list()),
    )
    return GenerationTables(outcomes, table, sufficiency_table(outcomes), sweep, recommended)
