"""Generation metrics and judge calibration on hand-computed cases, cross-checked against
scikit-learn and statsmodels."""

import math

import polars as pl
import pytest
from sklearn.metrics import cohen_kappa_score
from statsmodels.stats.proportion import proportion_confint

from rag_eval_pipeline.lib.judges.calibration import calibrate, cohen_kappa
from rag_eval_pipeline.lib.metrics.generation import (
    OUTCOME_SCHEMA,
    abstention_sweep,
    exact_match,
    judged_items,
    summarise,
    token_f1,
)
from rag_eval_pipeline.lib.metrics.retrieval import per_query
from rag_eval_pipeline.lib.metrics.statistics import wilson_interval

# The scoring exercise: (id, answerable, right page, retrieved top 3, refused, claims, supported,
# relevant).
EXERCISE = [
    (1, True, 1, [1, 4, 2], False, 3, 3, True),
    (2, True, 2, [2, 1, 6], False, 4, 3, True),
    (3, True, 3, [4, 1, 5], False, 2, 0, True),
    (4, True, 4, [4, 1, 6], False, 3, 3, True),
    (5, True, 5, [5, 3, 4], False, 2, 2, True),
    (6, True, 6, [3, 1, 6], False, 3, 2, True),
    (7, True, 1, [3, 2, 5], True, 0, 0, False),
    (8, True, 2, [2, 3, 1], False, 4, 4, False),
    (9, False, None, [5, 2, 1], False, 2, 0, False),
    (10, False, None, [1, 2, 3], True, 0, 0, False),
    (11, False, None, [4, 6, 2], True, 0, 0, False),
    (12, True, 3, [3, 1, 4], False, 3, 3, True),
]


def outcomes_frame(rows: list[dict]) -> pl.DataFrame:
    """Outcome rows with the columns ``summarise`` reads; the rest at neutral values."""
    filled = [
        {
            "stratum": "answerable" if row["answerable"] else "out_of_scope",
            "language": "en",
            "correct": not row["refused"] if row["answerable"] else row["refused"],
            "exact_match": 0.0,
            "token_f1": 0.0,
            "context_sufficient": True,
            "confident_wrong": False,
            "citation_valid": None if row["refused"] else True,
            "best_score": None,
            **row,
        }
        for row in rows
    ]
    return pl.DataFrame(filled, schema=OUTCOME_SCHEMA)


def claim_verdicts(item_id: str, claims: int, supported: int) -> list[dict]:
    """Claim rows: the first ``supported`` ENTAILED, the others UNSUPPORTED."""
    return [
        {
            "item_id": item_id,
            "verdict": "ENTAILED" if n < supported else "UNSUPPORTED",
            "citation_supported": None,
        }
        for n in range(claims)
    ]


def metric(metrics: list[dict], name: str) -> dict:
    [found] = [m for m in metrics if m["metric"] == name]
    return found


def test_faithfulness_of_one_answer_is_entailed_over_all_claims() -> None:
    verdicts = pl.DataFrame(
        {
            "item_id": ["q1"] * 4,
            "verdict": ["ENTAILED", "ENTAILED", "CONTRADICTED", "ENTAILED"],
            "citation_supported": [True, None, False, None],
        }
    )
    judged = judged_items(verdicts)
    assert judged.select("n_claims", "n_entailed", "n_contradicted", "n_citations").row(0) == (
        4,
        3,
        1,
        2,
    )
    outcomes = outcomes_frame([{"item_id": "q1", "answerable": True, "refused": False}])
    metrics = summarise(outcomes, judged)
    assert metric(metrics, "faithfulness")["value"] == 0.75
    assert metric(metrics, "contradicted_claim_rate")["value"] == 0.25
    assert metric(metrics, "citation_support")["value"] == 0.5


def test_judge_errors_are_never_counted_as_supported() -> None:
    verdicts = pl.DataFrame(
        {
            "item_id": ["q1"] * 2,
            "verdict": ["ENTAILED", "JUDGE_ERROR"],
            "citation_supported": [None, None],
        }
    )
    outcomes = outcomes_frame([{"item_id": "q1", "answerable": True, "refused": False}])
    rows = summarise(outcomes, judged_items(verdicts))
    # A claim the judge failed on is neither supported nor unsupported: it leaves the rates
    # (faithfulness is 1 of the 1 judged claim) and is counted beside them.
    assert metric(rows, "faithfulness")["value"] == 1.0
    assert metric(rows, "unsupported_claim_rate")["n"] == 1
    assert metric(rows, "judge_error_rate")["value"] == 0.5
    assert metric(rows, "judge_error_rate")["n"] == 2


def test_scoring_exercise() -> None:
    outcomes = outcomes_frame(
        [
            {"item_id": str(i), "answerable": answerable, "refused": refused}
            for i, answerable, _, _, refused, _, _, _ in EXERCISE
        ]
    )
    verdicts = pl.DataFrame(
        [
            row
            for i, _, _, _, refused, claims, supported, _ in EXERCISE
            if not refused
            for row in claim_verdicts(str(i), claims, supported)
        ],
        schema={"item_id": pl.String, "verdict": pl.String, "citation_supported": pl.Boolean},
    )
    relevance = pl.DataFrame(
        {
            "item_id": [str(row[0]) for row in EXERCISE if not row[4]],
            "relevant": [row[7] for row in EXERCISE if not row[4]],
        }
    )
    judged = judged_items(verdicts).join(relevance, on="item_id", how="left")
    metrics = summarise(outcomes, judged)

    # (1 + 3/4 + 0 + 1 + 1 + 2/3 + 1 + 0 + 1) / 9 over the nine answered rows.
    faithfulness = metric(metrics, "faithfulness")
    assert faithfulness["n"] == 9
    assert round(faithfulness["value"], 3) == 0.713
    assert faithfulness["value"] == pytest.approx((5 + 0.75 + 2 / 3) / 9)

    relevance_metric = metric(metrics, "answer_relevance")
    assert (relevance_metric["value"], relevance_metric["n"]) == (7 / 9, 9)
    correct_refusal = metric(metrics, "correct_refusal_rate")
    assert (correct_refusal["value"], correct_refusal["n"]) == (2 / 3, 3)
    false_refusal = metric(metrics, "false_refusal_rate")
    assert (false_refusal["value"], false_refusal["n"]) == (1 / 9, 9)
    # Refusals: items 7, 10, 11; two of the three are on no-answer items.
    assert metric(metrics, "refusal_precision")["value"] == 2 / 3


def test_scoring_exercise_hit_rate() -> None:
    run = pl.DataFrame(
        [
            {"query_id": str(i), "doc_id": f"page-{page}", "score": float(3 - rank)}
            for i, _, _, retrieved, *_ in EXERCISE
            for rank, page in enumerate(retrieved)
        ]
    )
    qrels = pl.DataFrame(
        [
            {"query_id": str(i), "doc_id": f"page-{right}", "grade": 3}
            for i, answerable, right, *_ in EXERCISE
            if answerable
        ]
    )
    values = per_query(run, qrels, ["Success@3"])
    hits = dict(zip(values["query_id"].to_list(), values["value"].to_list(), strict=True))
    # Unanswerable items have no qrels, so they are not scored.
    assert sorted(hits, key=int) == ["1", "2", "3", "4", "5", "6", "7", "8", "12"]
    assert [q for q, hit in hits.items() if hit == 0.0] == ["3", "7"]
    assert sum(hits.values()) / len(hits) == 7 / 9


def test_abstention_sweep_counts() -> None:
    answerable = [0.71, 0.64, 0.58, 0.52, 0.47, 0.44, 0.41, 0.33]
    unanswerable = [0.36, 0.31, 0.26, 0.19]
    best_scores = pl.DataFrame(
        {
            "answerable": [True] * len(answerable) + [False] * len(unanswerable),
            "best_score": answerable + unanswerable,
        }
    )
    thresholds = [0.20, 0.25, 0.30, 0.35, 0.40, 0.45, 0.50, 0.55, 0.60]
    sweep, recommended = abstention_sweep(best_scores, thresholds)
    assert sweep["threshold"].to_list() == thresholds
    # Answered when best score >= threshold; counted by hand from the lists above.
    assert sweep["unanswerable_answered"].to_list() == [3, 3, 2, 1, 0, 0, 0, 0, 0]
    assert sweep["answerable_refused"].to_list() == [0, 0, 0, 1, 1, 3, 4, 5, 6]
    # Fewest unanswerable answered (0), then fewest answerable refused (1): 0.40.
    assert recommended == 0.40
    assert sweep.filter(pl.col("recommended"))["threshold"].to_list() == [0.40]


@pytest.mark.parametrize(
    ("prediction", "references", "em", "f1"),
    [
        ("The Eiffel Tower!", ["eiffel tower"], 1.0, 1.0),
        ("U.S.A.", ["USA"], 1.0, 1.0),
        ("an apple", ["apple pie"], 0.0, 2 / 3),
        # Best over references: {30, days} gives P 2/3, R 1 -> 0.8; the other 2/3.
        ("within 30 days", ["30 days", "within thirty days"], 0.0, 0.8),
        # Shared tokens are clipped by count: cat x1, sat x1 -> P 2/3, R 2/4 -> 4/7.
        ("the cat the cat sat", ["cat sat on mat"], 0.0, 4 / 7),
        ("", [], 1.0, 1.0),
        ("", ["the"], 1.0, 1.0),
        ("Paris", [], 0.0, 0.0),
        ("", ["Paris"], 0.0, 0.0),
    ],
)
def test_squad_exact_match_and_token_f1(
    prediction: str, references: list[str], em: float, f1: float
) -> None:
    assert exact_match(prediction, references) == em
    assert token_f1(prediction, references) == pytest.approx(f1)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (["E", "E", "U", "C", "E", "U"], ["E", "U", "U", "C", "E", "E"]),
        (["E", "E", "E", "U"], ["E", "E", "E", "U"]),
        (["E", "U", "E", "U", "C"], ["U", "E", "U", "E", "E"]),
        (["E"] * 9 + ["U"], ["E"] * 10),
    ],
)
def test_cohen_kappa_matches_scikit_learn(first: list[str], second: list[str]) -> None:
    assert cohen_kappa(first, second) == pytest.approx(cohen_kappa_score(first, second))


def test_cohen_kappa_hand_case_and_undefined() -> None:
    # p_o = 4/6; p_e = (3*3 + 2*2 + 1*1) / 36 = 14/36; kappa = (24/36 - 14/36) / (22/36) = 5/11.
    first = ["E", "E", "U", "C", "E", "U"]
    second = ["E", "U", "U", "C", "E", "E"]
    assert cohen_kappa(first, second) == pytest.approx(5 / 11)
    assert cohen_kappa(["E", "E"], ["E", "E"]) is None
    assert cohen_kappa([], []) is None


@pytest.mark.parametrize(("successes", "n"), [(38, 200), (0, 10), (10, 10), (1, 3), (7, 9)])
def test_wilson_interval_matches_statsmodels(successes: int, n: int) -> None:
    low, high = wilson_interval(successes, n)
    expected_low, expected_high = proportion_confint(successes, n, alpha=0.05, method="wilson")
    assert low == pytest.approx(max(expected_low, 0.0), abs=1e-12)
    assert high == pytest.approx(min(expected_high, 1.0), abs=1e-12)


def test_wilson_interval_seed_figure_and_empty() -> None:
    low, high = wilson_interval(38, 200)
    assert (round(low, 4), round(high, 4)) == (0.1417, 0.25)
    assert wilson_interval(0, 0) == (None, None)


def calibration_frames(judge: list[str], human: list[str]) -> tuple[pl.DataFrame, pl.DataFrame]:
    claims = [f"claim {n}" for n in range(len(judge))]
    verdicts = pl.DataFrame({"item_id": ["q"] * len(judge), "claim": claims, "verdict": judge})
    labels = pl.DataFrame({"item_id": ["q"] * len(human), "claim": claims, "human_verdict": human})
    return verdicts, labels


def test_calibrate_without_labels_says_not_calibrated() -> None:
    verdicts, _ = calibration_frames(["ENTAILED"], ["ENTAILED"])
    for labels in (None, pl.DataFrame(schema=verdicts.schema | {"human_verdict": pl.String})):
        row = calibrate(verdicts, labels, judge_id="llm:fake")
        assert row["calibrated"] is False
        assert row["reason"] == "judge not calibrated: no human labels"


def test_calibrate_with_low_kappa_says_not_calibrated() -> None:
    # 40 claims, 20 each way; the judge agrees on 24: p_o = 0.6, p_e = 0.5, kappa = 0.2.
    human = ["ENTAILED"] * 20 + ["UNSUPPORTED"] * 20
    judge = ["ENTAILED"] * 12 + ["UNSUPPORTED"] * 8 + ["UNSUPPORTED"] * 12 + ["ENTAILED"] * 8
    verdicts, labels = calibration_frames(judge, human)
    row = calibrate(verdicts, labels, judge_id="llm:fake")
    assert row["n"] == 40
    assert row["agreement"] == 0.6
    assert row["kappa"] == pytest.approx(0.2)
    assert row["calibrated"] is False
    assert row["reason"].startswith("judge not calibrated: kappa 0.200 below 0.6")
    low, high = proportion_confint(24, 40, alpha=0.05, method="wilson")
    assert (row["ci_low"], row["ci_high"]) == (pytest.approx(low), pytest.approx(high))


def test_calibrate_with_high_kappa_and_enough_labels_is_calibrated() -> None:
    human = ["ENTAILED"] * 20 + ["UNSUPPORTED"] * 20
    judge = ["ENTAILED"] * 19 + ["UNSUPPORTED"] * 21
    verdicts, labels = calibration_frames(judge, human)
    row = calibrate(verdicts, labels, judge_id="llm:fake")
    assert row["calibrated"] is True
    assert math.isclose(row["kappa"], cohen_kappa_score(judge, human))


def test_calibrate_with_too_few_labels_says_not_calibrated() -> None:
    verdicts, labels = calibration_frames(["ENTAILED"] * 10, ["ENTAILED"] * 10)
    row = calibrate(verdicts, labels, judge_id="llm:fake")
    assert row["calibrated"] is False
    assert "10 labelled claims matched, need 30" in row["reason"]
