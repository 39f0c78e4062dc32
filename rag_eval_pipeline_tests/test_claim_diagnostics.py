"""RAGChecker-style claim diagnostics (rag_eval_pipeline/lib/metrics/claim_diagnostics.py).

The module is loaded from its file with importlib, so the test does not depend on the package's
``__init__`` files while the package is being restructured.
"""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path
from types import ModuleType

import polars as pl
import pytest

MODULE_PATH = (
    Path(__file__).parents[1] / "rag_eval_pipeline" / "lib" / "metrics" / "claim_diagnostics.py"
)


def _load() -> ModuleType:
    """Import claim_diagnostics.py from its path."""
    name = "_claim_diagnostics_under_test"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, MODULE_PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


cd = _load()
E, C, U = "ENTAILED", "CONTRADICTED", "UNSUPPORTED"


def _frames(
    answer_claims: list[tuple[str, str, str]],
    reference_claims: list[tuple[str, str, str]],
    passages: list[tuple[str, str, int | None]],
    answer_checks: list[tuple[str, str, str, str]],
    reference_checks: list[tuple[str, str, str, str]],
) -> dict[str, pl.DataFrame]:
    """The five input frames from plain tuples."""
    claim = {"item_id": pl.String, "claim_id": pl.String}
    check = {**claim, "passage_id": pl.String, "verdict": pl.String}
    return {
        "answer_claims": pl.DataFrame(
            answer_claims, schema={**claim, "reference_verdict": pl.String}, orient="row"
        ),
        "reference_claims": pl.DataFrame(
            reference_claims, schema={**claim, "answer_verdict": pl.String}, orient="row"
        ),
        "passages": pl.DataFrame(
            passages,
            schema={"item_id": pl.String, "passage_id": pl.String, "gold_grade": pl.Int64},
            orient="row",
        ),
        "answer_claim_verdicts": pl.DataFrame(answer_checks, schema=check, orient="row"),
        "reference_claim_verdicts": pl.DataFrame(reference_checks, schema=check, orient="row"),
    }


def example() -> dict[str, pl.DataFrame]:
    """Three items, written out.

    q1: passages p1 (grade 3, relevant), p2 (grade 2, relevant), p3 (grade 0, irrelevant).
        answer claims (ref verdict; context verdicts):
          a1 E; p1 E                       correct, in context
          a2 C; p3 E                       incorrect (contradicts ref), only in irrelevant p3
          a3 U; p2 E, p3 E                 incorrect (not in ref), in relevant p2 (and p3)
          a4 C; p1 C                       incorrect, context-contradicted (hallucination)
          a5 U; none                       incorrect, context-unsupported (hallucination)
          a6 E; p3 C                       correct, context-contradicted (self-knowledge)
        reference claims (answer verdict; context verdicts):
          r1 E; p1 E    r2 U; p1 E    r3 C; p2 E    r4 E; none    r5 U; p3 C
    q2: one passage p1 (ungraded: not relevant); answer claims b1 E (p1 E), b2 U (none);
        no reference claims.
    q3: reference claims only (s1 U, s2 E; no passages); no answer claims.
    """
    return _frames(
        answer_claims=[
            ("q1", "a1", E),
            ("q1", "a2", C),
            ("q1", "a3", U),
            ("q1", "a4", C),
            ("q1", "a5", U),
            ("q1", "a6", E),
            ("q2", "b1", E),
            ("q2", "b2", U),
        ],
        reference_claims=[
            ("q1", "r1", E),
            ("q1", "r2", U),
            ("q1", "r3", C),
            ("q1", "r4", E),
            ("q1", "r5", U),
            ("q3", "s1", U),
            ("q3", "s2", E),
        ],
        passages=[("q1", "p1", 3), ("q1", "p2", 2), ("q1", "p3", 0), ("q2", "p1", None)],
        answer_checks=[
            ("q1", "a1", "p1", E),
            ("q1", "a2", "p3", E),
            ("q1", "a3", "p2", E),
            ("q1", "a3", "p3", E),
            ("q1", "a4", "p1", C),
            ("q1", "a6", "p3", C),
            ("q1", "a6", "p1", U),  # an explicit UNSUPPORTED row changes nothing
            ("q2", "b1", "p1", E),
        ],
        reference_checks=[
            ("q1", "r1", "p1", E),
            ("q1", "r2", "p1", E),
            ("q1", "r3", "p2", E),
            ("q1", "r5", "p3", C),
        ],
    )


def _by_item(frame: pl.DataFrame) -> dict[str, dict]:
    return {row["item_id"]: row for row in frame.iter_rows(named=True)}


def test_hand_computed_metrics_per_item() -> None:
    rows = _by_item(cd.claim_diagnostics(**example()))
    assert list(rows) == ["q1", "q2", "q3"]
    q1, q2, q3 = rows["q1"], rows["q2"], rows["q3"]

    # q1 counts: |A| = 6, |R| = 5, |P| = 3, relevant p1 p2, reference claims in context r1 r2 r3.
    assert (q1["n_answer_claims"], q1["n_reference_claims"], q1["n_passages"]) == (6, 5, 3)
    assert (q1["n_relevant_passages"], q1["n_reference_claims_in_context"]) == (2, 3)
    expected_q1 = {
        # correct a1 a6 → 2/6; ref-contradicted a2 a4 → 2/6; ref-unsupported a3 a5 → 2/6
        "precision": 2 / 6,
        "incorrect_ref_contradicted": 2 / 6,
        "incorrect_ref_unsupported": 2 / 6,
        # stated r1 r4 → 2/5; answer contradicts r3 → 1/5; answer lacks r2 r5 → 2/5
        "claim_recall": 2 / 5,
        "claim_missed_ans_contradicted": 1 / 5,
        "claim_missed_ans_unsupported": 2 / 5,
        # f1 = 2·(1/3)·(2/5) / (1/3 + 2/5) = (4/15) / (11/15) = 4/11
        "f1": 4 / 11,
        # in context r1 r2 r3 → 3/5; r5 only contradicted (p3) → 1/5; r4 in nothing → 1/5
        "context_claim_recall": 3 / 5,
        "context_claim_missed_ctx_contradicted": 1 / 5,
        "context_claim_missed_ctx_unsupported": 1 / 5,
        # passages entailing a reference claim: p1 (r1, r2), p2 (r3); not p3 → 2/3
        "context_precision": 2 / 3,
        # of r1 r2 r3 (in context), stated: r1 → 1/3; r3 contradicted → 1/3; r2 absent → 1/3
        "context_utilisation": 1 / 3,
        "context_unused_ans_contradicted": 1 / 3,
        "context_unused_ans_unsupported": 1 / 3,
        # incorrect ∧ entailed by a relevant passage: a3 (p2; ref U) → 1/6
        "noise_sensitivity_in_relevant": 1 / 6,
        "noise_sensitivity_in_relevant_ref_contradicted": 0.0,
        "noise_sensitivity_in_relevant_ref_unsupported": 1 / 6,
        # incorrect ∧ entailed only by irrelevant passages: a2 (p3; ref C) → 1/6
        # (a3 is also entailed by irrelevant p3 but counts as relevant: exclusive)
        "noise_sensitivity_in_irrelevant": 1 / 6,
        "noise_sensitivity_in_irrelevant_ref_contradicted": 1 / 6,
        "noise_sensitivity_in_irrelevant_ref_unsupported": 0.0,
        # incorrect ∧ not in context: a4 (ref C, ctx C), a5 (ref U, ctx U) → 2/6
        "hallucination": 2 / 6,
        "hallucination_ref_contradicted": 1 / 6,
        "hallucination_ref_unsupported": 1 / 6,
        "hallucination_ctx_contradicted": 1 / 6,
        "hallucination_ctx_unsupported": 1 / 6,
        # correct ∧ not in context: a6 (p3 contradicts it) → 1/6
        "self_knowledge": 1 / 6,
        "self_knowledge_ctx_contradicted": 1 / 6,
        "self_knowledge_ctx_unsupported": 0.0,
        # in context: a1 a2 a3 → 3/6; contradicted only: a4 a6 → 2/6; nothing: a5 → 1/6
        "faithfulness": 3 / 6,
        "unfaithful_ctx_contradicted": 2 / 6,
        "unfaithful_ctx_unsupported": 1 / 6,
    }
    assert set(expected_q1) == set(cd.METRICS)
    for metric, value in expected_q1.items():
        assert q1[metric] == pytest.approx(value, abs=1e-12), metric

    # q2: |A| = 2 (b1 correct & in context, b2 ref-unsupported & in no passage), |R| = 0.
    assert q2["precision"] == 0.5 and q2["incorrect_ref_unsupported"] == 0.5
    assert q2["faithfulness"] == 0.5 and q2["self_knowledge"] == 0.0
    assert q2["hallucination"] == 0.5 and q2["hallucination_ctx_unsupported"] == 0.5
    # ungraded p1 is irrelevant, but b1 is correct: no noise sensitivity
    assert q2["noise_sensitivity_in_relevant"] == 0.0
    assert q2["noise_sensitivity_in_irrelevant"] == 0.0
    # empty reference-claim denominators: left out, not 0
    for metric in ("claim_recall", "context_claim_recall", "context_utilisation", "f1"):
        assert q2[metric] is None, metric
    assert q2["context_precision"] is None  # no reference claim: no passage can be useful

    # q3: |A| = 0, |P| = 0, |R| = 2 (s2 stated, none in context).
    assert q3["claim_recall"] == 0.5 and q3["claim_missed_ans_unsupported"] == 0.5
    assert q3["context_claim_recall"] == 0.0  # denominator |R| = 2: a real 0
    assert q3["context_claim_missed_ctx_unsupported"] == 1.0
    assert q3["context_utilisation"] is None  # no reference claim in the context
    assert q3["context_precision"] is None  # no passages
    assert q3["f1"] is None  # precision undefined (no answer claims)
    for metric in ("precision", "faithfulness", "hallucination", "self_knowledge"):
        assert q3[metric] is None, metric
    assert q3["noise_sensitivity_in_relevant"] is None


def test_splits_sum_to_their_metric_and_identities_hold() -> None:
    frame = cd.claim_diagnostics(**example())
    splits = {
        "claim_recall": None,
        "noise_sensitivity_in_relevant": (
            "noise_sensitivity_in_relevant_ref_contradicted",
            "noise_sensitivity_in_relevant_ref_unsupported",
        ),
        "noise_sensitivity_in_irrelevant": (
            "noise_sensitivity_in_irrelevant_ref_contradicted",
            "noise_sensitivity_in_irrelevant_ref_unsupported",
        ),
        "hallucination": ("hallucination_ref_contradicted", "hallucination_ref_unsupported"),
        "self_knowledge": ("self_knowledge_ctx_contradicted", "self_knowledge_ctx_unsupported"),
    }
    for row in frame.iter_rows(named=True):
        if row["n_answer_claims"] == 0:
            continue
        for parent, parts in splits.items():
            if parts:
                assert row[parent] == pytest.approx(row[parts[0]] + row[parts[1]]), parent
        assert row["hallucination"] == pytest.approx(
            row["hallucination_ctx_contradicted"] + row["hallucination_ctx_unsupported"]
        )
        assert row["precision"] + row["incorrect_ref_contradicted"] + row[
            "incorrect_ref_unsupported"
        ] == pytest.approx(1.0)
        assert row["faithfulness"] + row["unfaithful_ctx_contradicted"] + row[
            "unfaithful_ctx_unsupported"
        ] == pytest.approx(1.0)
        assert row["hallucination"] + row["self_knowledge"] + row["faithfulness"] == pytest.approx(
            1.0
        )


def test_aggregate_leaves_out_empty_denominators() -> None:
    per_item = cd.claim_diagnostics(**example())
    summary = {row["metric"]: row for row in cd.aggregate_claim_diagnostics(per_item).to_dicts()}
    assert list(summary) == list(cd.METRICS)
    # precision: q1 1/3, q2 1/2; q3 left out → mean 5/12 over 2 items, not (1/3 + 1/2 + 0)/3
    assert summary["precision"]["mean"] == pytest.approx(5 / 12)
    assert (summary["precision"]["n_items"], summary["precision"]["n_items_left_out"]) == (2, 1)
    # claim recall: q1 2/5, q3 1/2; q2 left out
    assert summary["claim_recall"]["mean"] == pytest.approx(0.45)
    assert summary["claim_recall"]["n_items_left_out"] == 1
    # context precision and utilisation: only q1
    assert summary["context_precision"]["mean"] == pytest.approx(2 / 3)
    assert (
        summary["context_utilisation"]["n_items"],
        summary["context_utilisation"]["n_items_left_out"],
    ) == (1, 2)
    # a metric with no item at all
    nothing = cd.aggregate_claim_diagnostics(per_item.filter(pl.col("item_id") == "q3"))
    row = nothing.filter(pl.col("metric") == "faithfulness").row(0, named=True)
    assert row == {"metric": "faithfulness", "mean": None, "n_items": 0, "n_items_left_out": 1}


def test_items_argument_reports_items_with_no_rows() -> None:
    frames = example()
    per_item = cd.claim_diagnostics(**frames, items=["q3", "q1", "q2", "q4"])
    assert per_item.get_column("item_id").to_list() == ["q3", "q1", "q2", "q4"]
    q4 = _by_item(per_item)["q4"]
    assert q4["n_answer_claims"] == 0 and all(q4[m] is None for m in cd.METRICS)
    with pytest.raises(ValueError, match="not in items"):
        cd.claim_diagnostics(**frames, items=["q1"])


def test_relevance_by_gold_grade_or_by_reference_claims() -> None:
    # One item: p1 graded 3 but entails no reference claim; p2 graded 0 but entails r1.
    # The incorrect answer claim a1 is entailed by p1 only.
    frames = _frames(
        answer_claims=[("q", "a1", C), ("q", "a2", E)],
        reference_claims=[("q", "r1", U)],
        passages=[("q", "p1", 3), ("q", "p2", 0)],
        answer_checks=[("q", "a1", "p1", E), ("q", "a2", "p2", E)],
        reference_checks=[("q", "r1", "p2", E)],
    )
    gold = _by_item(cd.claim_diagnostics(**frames))["q"]
    assert gold["noise_sensitivity_in_relevant"] == 0.5  # p1 relevant by its grade
    assert gold["noise_sensitivity_in_irrelevant"] == 0.0
    assert gold["n_relevant_passages"] == 1
    ragchecker = _by_item(cd.claim_diagnostics(**frames, relevance="reference_claims"))["q"]
    assert ragchecker["noise_sensitivity_in_relevant"] == 0.0  # p1 holds no reference claim
    assert ragchecker["noise_sensitivity_in_irrelevant"] == 0.5
    assert ragchecker["noise_sensitivity_in_irrelevant_ref_contradicted"] == 0.5
    # with relevance from reference claims and no reference claims, noise sensitivity is undefined
    no_reference = _frames([("q", "a1", C)], [], [("q", "p1", 3)], [("q", "a1", "p1", E)], [])
    row = _by_item(cd.claim_diagnostics(**no_reference, relevance="reference_claims"))["q"]
    assert row["noise_sensitivity_in_relevant"] is None and row["faithfulness"] == 1.0
    row = _by_item(cd.claim_diagnostics(**no_reference))["q"]
    assert row["noise_sensitivity_in_relevant"] == 1.0  # gold grade 3: defined


def test_empty_inputs_give_an_empty_frame() -> None:
    empty = {
        "answer_claims": pl.DataFrame({"item_id": [], "claim_id": [], "reference_verdict": []}),
        "reference_claims": pl.DataFrame({"item_id": [], "claim_id": [], "answer_verdict": []}),
        "passages": pl.DataFrame({"item_id": [], "passage_id": [], "gold_grade": []}),
        "answer_claim_verdicts": pl.DataFrame(
            {"item_id": [], "claim_id": [], "passage_id": [], "verdict": []}
        ),
        "reference_claim_verdicts": pl.DataFrame(
            {"item_id": [], "claim_id": [], "passage_id": [], "verdict": []}
        ),
    }
    out = cd.claim_diagnostics(**empty)
    assert out.height == 0 and out.columns[:1] == ["item_id"]
    assert cd.aggregate_claim_diagnostics(out).get_column("n_items").sum() == 0


def test_bad_inputs_raise() -> None:
    frames = example()
    bad_verdict = {
        **frames,
        "answer_claims": frames["answer_claims"].with_columns(
            pl.when(pl.col("claim_id") == "a1")
            .then(pl.lit("Entailment"))
            .otherwise(pl.col("reference_verdict"))
            .alias("reference_verdict")
        ),
    }
    with pytest.raises(ValueError, match="unknown verdicts"):
        cd.claim_diagnostics(**bad_verdict)
    unknown_passage = {
        **frames,
        "answer_claim_verdicts": pl.concat(
            [
                frames["answer_claim_verdicts"],
                pl.DataFrame(
                    [("q1", "a1", "p9", E)],
                    schema=frames["answer_claim_verdicts"].schema,
                    orient="row",
                ),
            ]
        ),
    }
    with pytest.raises(ValueError, match="passages not in passages"):
        cd.claim_diagnostics(**unknown_passage)
    unknown_claim = {
        **frames,
        "reference_claim_verdicts": pl.DataFrame(
            [("q1", "r9", "p1", E)], schema=frames["reference_claim_verdicts"].schema, orient="row"
        ),
    }
    with pytest.raises(ValueError, match="claims not in reference_claims"):
        cd.claim_diagnostics(**unknown_claim)
    duplicated = {**frames, "passages": pl.concat([frames["passages"], frames["passages"][:1]])}
    with pytest.raises(ValueError, match="repeats"):
        cd.claim_diagnostics(**duplicated)
    with pytest.raises(ValueError, match="lacks columns"):
        cd.claim_diagnostics(**{**frames, "passages": frames["passages"].drop("gold_grade")})
    with pytest.raises(ValueError, match="relevance"):
        cd.claim_diagnostics(**frames, relevance="grade")  # type: ignore[arg-type]


# Cross-check against RAGChecker's definitions (paper §3 and ragchecker/metrics.py), written
# independently here as set arithmetic over one item. RAGChecker's inputs per item:
#   answer2response[a]: response claim a entailed by the ground-truth answer (correct)
#   response2answer[r]: ground-truth claim r entailed by the response
#   retrieved2answer[r][p]: ground-truth claim r entailed by chunk p
#   retrieved2response[a][p]: response claim a entailed by chunk p
# and a relevant chunk is one that entails a ground-truth claim. RAGChecker's "recall" is our
# claim_recall; its "claim_recall" (a retriever metric) is our context_claim_recall.
def ragchecker_reference(
    response_claims: set[str],
    correct: set[str],
    gt_claims: set[str],
    stated: set[str],
    chunks: set[str],
    gt_in_chunk: set[tuple[str, str]],
    response_in_chunk: set[tuple[str, str]],
) -> dict[str, float]:
    """RAGChecker's eleven metrics for one item with non-empty claim and chunk sets."""
    recalled = {r for r, _ in gt_in_chunk}
    relevant = {p for _, p in gt_in_chunk}
    faithful = {a for a, _ in response_in_chunk}
    in_relevant = {a for a, p in response_in_chunk if p in relevant}
    in_irrelevant = {a for a, p in response_in_chunk if p not in relevant} - in_relevant
    incorrect = response_claims - correct
    n_a = len(response_claims)
    precision = len(correct) / n_a
    recall = len(stated) / len(gt_claims)
    return {
        "precision": precision,
        "claim_recall": recall,
        "f1": 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall),
        "context_claim_recall": len(recalled) / len(gt_claims),
        "context_precision": len(relevant) / len(chunks),
        **({"context_utilisation": len(recalled & stated) / len(recalled)} if recalled else {}),
        "noise_sensitivity_in_relevant": len(incorrect & in_relevant) / n_a,
        "noise_sensitivity_in_irrelevant": len(incorrect & in_irrelevant) / n_a,
        "hallucination": len(incorrect - faithful) / n_a,
        "self_knowledge": len(correct - faithful) / n_a,
        "faithfulness": len(faithful) / n_a,
    }


def test_matches_ragchecker_definitions_on_the_worked_case() -> None:
    # Item q1 of the example, as RAGChecker sees it (CONTRADICTED and UNSUPPORTED both "not
    # entailed"):
    reference = ragchecker_reference(
        response_claims={"a1", "a2", "a3", "a4", "a5", "a6"},
        correct={"a1", "a6"},
        gt_claims={"r1", "r2", "r3", "r4", "r5"},
        stated={"r1", "r4"},
        chunks={"p1", "p2", "p3"},
        gt_in_chunk={("r1", "p1"), ("r2", "p1"), ("r3", "p2")},
        response_in_chunk={("a1", "p1"), ("a2", "p3"), ("a3", "p2"), ("a3", "p3")},
    )
    # Here gold-graded relevance (p1, p2) and RAGChecker's (chunks with a ground-truth claim:
    # p1, p2) agree, so both settings must reproduce RAGChecker.
    for relevance in ("gold_grade", "reference_claims"):
        q1 = _by_item(cd.claim_diagnostics(**example(), relevance=relevance))["q1"]
        for metric, value in reference.items():
            assert q1[metric] == pytest.approx(value, abs=1e-12), (relevance, metric)


def test_matches_ragchecker_definitions_on_random_items() -> None:
    rnd = random.Random(20261015)
    answer_claims, reference_claims, passages, answer_checks, reference_checks = [], [], [], [], []
    references: dict[str, dict[str, float]] = {}
    for i in range(60):
        item = f"item{i:02d}"
        a_ids = [f"a{j}" for j in range(rnd.randint(1, 6))]
        r_ids = [f"r{j}" for j in range(rnd.randint(1, 5))]
        p_ids = [f"p{j}" for j in range(rnd.randint(1, 4))]
        ref_verdict = {a: rnd.choice(VERDICT_CHOICES) for a in a_ids}
        ans_verdict = {r: rnd.choice(VERDICT_CHOICES) for r in r_ids}
        a_ctx = {(a, p): rnd.choice(VERDICT_CHOICES) for a in a_ids for p in p_ids}
        r_ctx = {(r, p): rnd.choice(VERDICT_CHOICES) for r in r_ids for p in p_ids}
        answer_claims += [(item, a, v) for a, v in ref_verdict.items()]
        reference_claims += [(item, r, v) for r, v in ans_verdict.items()]
        passages += [(item, p, rnd.choice([0, 1, 2, 3, None])) for p in p_ids]
        # drop some UNSUPPORTED rows: a missing pair must read as UNSUPPORTED
        answer_checks += [
            (item, a, p, v) for (a, p), v in a_ctx.items() if v != U or rnd.random() < 0.5
        ]
        reference_checks += [
            (item, r, p, v) for (r, p), v in r_ctx.items() if v != U or rnd.random() < 0.5
        ]
        references[item] = ragchecker_reference(
            response_claims=set(a_ids),
            correct={a for a, v in ref_verdict.items() if v == E},
            gt_claims=set(r_ids),
            stated={r for r, v in ans_verdict.items() if v == E},
            chunks=set(p_ids),
            gt_in_chunk={k for k, v in r_ctx.items() if v == E},
            response_in_chunk={k for k, v in a_ctx.items() if v == E},
        )
    frames = _frames(answer_claims, reference_claims, passages, answer_checks, reference_checks)
    rows = _by_item(cd.claim_diagnostics(**frames, relevance="reference_claims"))
    for item, reference in references.items():
        for metric, value in reference.items():
            assert rows[item][metric] == pytest.approx(value, abs=1e-12), (item, metric)
        if "context_utilisation" not in reference:
            assert rows[item]["context_utilisation"] is None  # RAGChecker writes 0 here


VERDICT_CHOICES = (E, E, C, U)
