"""The real graph on the fixture library, into a temporary DuckDB file, checked table by table.

Expected figures are computed by hand from the ranked lists asserted in
``test_retrieval_results_are_the_bm25_ranking``.
"""

import math
from pathlib import Path

import duckdb
import pytest

from rag_eval_pipeline.lib.store.warehouse import TABLES

from .conftest import materialize_night


@pytest.fixture
def warehouse(library, tmp_path):
    path = tmp_path / "warehouse" / "rag_eval.duckdb"
    result = materialize_night(library, path)
    assert result.success
    connection = duckdb.connect(str(path), read_only=True)
    yield connection
    connection.close()


def rows(connection, query, parameters=None):
    return connection.sql(query, params=parameters).fetchall()


def test_retrieval_results_are_the_bm25_ranking(warehouse):
    ranked = rows(
        warehouse,
        "SELECT item_id, list(passage_id ORDER BY rank) FROM retrieval_results "
        "GROUP BY item_id ORDER BY item_id",
    )
    assert ranked == [
        ("q1", ["LAB-LABEL-001@v2#s2", "LAB-LABEL-001@v2#s1"]),
        ("q2", ["STORE-FRIDGE-001@v1#s1", "STORE-FRIDGE-001@v1#s2", "CLEAN-LOG-001@v1#s2"]),
        ("q3", ["CLEAN-LOG-001@v1#s2", "CLEAN-LOG-001@v1#s1", "LAB-LABEL-001@v2#s1"]),
        ("q5", ["STORE-FRIDGE-001@v1#s1", "LAB-LABEL-001@v2#s1", "CLEAN-LOG-001@v1#s2"]),
    ]
    # The superseded v1 and the withdrawn fax procedure are filtered out by metadata.
    assert rows(warehouse, "SELECT DISTINCT status FROM retrieval_results") == [("current",)]


def test_retrieval_metrics_match_hand_computation(warehouse):
    values = dict(
        rows(
            warehouse,
            "SELECT measure, value FROM retrieval_metrics "
            "WHERE scope = 'overall' AND scope_value = 'answerable'",
        )
    )
    # q1: relevant {v2#s2} at rank 1; q2: {fridge s1} at 1; q3: {log s2, log s1} at 1 and 2.
    assert values["Success@1"] == pytest.approx(1.0)
    assert values["R@1"] == pytest.approx((1 + 1 + 0.5) / 3)
    assert values["P@3"] == pytest.approx((1 / 3 + 1 / 3 + 2 / 3) / 3)
    assert values["P@5"] == pytest.approx((1 / 5 + 1 / 5 + 2 / 5) / 3)
    assert values["RR@5"] == pytest.approx(1.0)
    assert values["AP"] == pytest.approx(1.0)
    # q1 has the superseded v1 section at grade 1 in its ideal list: DCG 3, ideal 3 + 1/log2(3).
    q1_ndcg = 3 / (3 + 1 / math.log2(3))
    assert values["nDCG@3"] == pytest.approx((q1_ndcg + 1 + 1) / 3)
    q1_exp = 7 / (7 + 1 / math.log2(3))
    assert values["nDCG_exp@3"] == pytest.approx((q1_exp + 1 + 1) / 3)
    assert values["Stale@5"] == 0.0
    n_values = {
        n
        for (n,) in rows(
            warehouse, "SELECT DISTINCT n FROM retrieval_metrics WHERE scope = 'overall'"
        )
    }
    assert n_values == {3}
    # Success is a proportion: Wilson interval for 3 of 3.
    low, high = rows(
        warehouse,
        "SELECT ci_low, ci_high FROM retrieval_metrics WHERE scope = 'overall' AND measure = 'Success@1'",
    )[0]
    assert (round(low, 4), round(high, 4)) == (0.4385, 1.0)


def test_generation_results_guardrails_and_citations(warehouse):
    results = {
        item: (refused, reason, cited)
        for item, refused, reason, cited in rows(
            warehouse,
            "SELECT item_id, refused, refusal_reason, cited_ids FROM generation_results",
        )
    }
    assert results["q1"][:2] == (False, None)
    assert results["q1"][2] == ["LAB-LABEL-001@v2#s2"]
    assert results["q4"][1] == "input_check:out_of_scope"
    assert results["q6"][1] == "input_check:prompt_override"
    assert results["q5"][1] == "evidence_check:no_current_passage_above_threshold"
    answer = rows(warehouse, "SELECT answer FROM generation_results WHERE item_id = 'q1'")[0][0]
    assert "within 15 minutes of collection" in answer
    assert answer.endswith("[LAB-LABEL-001@v2#s2]")


def test_generation_metrics_match_hand_computation(warehouse):
    metric = dict(
        rows(
            warehouse,
            "SELECT metric, value FROM generation_metrics "
            "WHERE scope = 'overall' AND scope_value = 'answerable'",
        )
    )
    # q1, q2, q3 answered with the sentence that holds their must_mention; every claim is
    # copied from the context, so all are ENTAILED and every citation supports its claim.
    assert metric["answer_correct_rate"] == 1.0
    assert metric["false_refusal_rate"] == 0.0
    assert metric["confident_wrong_rate"] == 0.0
    assert metric["faithfulness"] == 1.0
    assert metric["citation_validity"] == 1.0
    assert metric["citation_support"] == 1.0
    no_answer = dict(
        rows(
            warehouse,
            "SELECT metric, value FROM generation_metrics "
            "WHERE scope = 'overall' AND scope_value = 'no_answer'",
        )
    )
    assert no_answer["correct_refusal_rate"] == 1.0
    strata = rows(
        warehouse,
        "SELECT scope_value, value, n FROM generation_metrics "
        "WHERE scope = 'stratum' AND metric = 'correct_refusal_rate' ORDER BY scope_value",
    )
    assert strata == [
        ("out_of_scope", 1.0, 1),
        ("prompt_injection", 1.0, 1),
        ("withdrawn_document", 1.0, 1),
    ]
    # The no-answer items never enter the headline scope.
    assert rows(
        warehouse,
        "SELECT max(n) FROM generation_metrics WHERE scope = 'overall' AND scope_value = 'answerable'",
    ) == [(3,)]
    assert rows(
        warehouse,
        "SELECT context_sufficient, answer_correct, count FROM sufficiency_correctness "
        "ORDER BY context_sufficient DESC, answer_correct DESC",
    ) == [(True, True, 3), (True, False, 0), (False, True, 0), (False, False, 0)]


def test_judge_verdicts_name_the_supporting_passage(warehouse):
    verdicts = rows(
        warehouse,
        "SELECT item_id, verdict, passage_id, citation_supported, replayed FROM judge_verdicts "
        "ORDER BY item_id, claim_index",
    )
    assert verdicts
    assert {v[1] for v in verdicts} == {"ENTAILED"}
    assert ("q1", "ENTAILED", "LAB-LABEL-001@v2#s2", True, False) in verdicts


def test_abstention_sweep_recommends_a_threshold(warehouse):
    recommended = rows(
        warehouse,
        "SELECT threshold, unanswerable_answered, answerable_refused FROM abstention_sweep WHERE recommended",
    )
    # q5 (withdrawn) scores 0.607; the answerable items score 2.308 and above. Candidates are
    # the observed best scores: the lowest that refuses q5 and answers the rest is q3's 2.308.
    assert len(recommended) == 1
    threshold, unanswerable_answered, answerable_refused = recommended[0]
    assert round(threshold, 3) == 2.308
    assert (unanswerable_answered, answerable_refused) == (0, 0)


def test_every_contract_table_is_scoped_and_filled(warehouse):
    # The fixture's gates file has no metric gates (the regression gate is the comparison's).
    empty_by_design = {"run_comparisons", "rebaseline_offsets", "gate_results"}
    for table in TABLES:
        count = rows(warehouse, f"SELECT count(*) FROM {table}")[0][0]
        if table not in empty_by_design:
            assert count > 0, table
    run = rows(
        warehouse,
        "SELECT eval_run_id, corpus_digest, golden_digest, completed_at, headline FROM eval_runs",
    )
    assert len(run) == 1
    eval_run_id, corpus_digest, golden_digest, completed_at, headline = run[0]
    assert eval_run_id.startswith("2026-10-15-")
    assert completed_at is not None and '"Success@5"' in headline
    assert rows(warehouse, "SELECT DISTINCT corpus_digest FROM corpus_passages") == [
        (corpus_digest,)
    ]
    for table in (
        "retrieval_results",
        "generation_results",
        "judge_verdicts",
        "retrieval_metrics",
        "generation_metrics",
    ):
        assert rows(warehouse, f"SELECT DISTINCT eval_run_id FROM {table}") == [(eval_run_id,)]
    assert len(golden_digest) == 64


def test_rerunning_a_partition_replaces_only_its_rows(library, tmp_path):
    path = tmp_path / "w.duckdb"
    assert materialize_night(library, path, "2026-10-15").success
    assert materialize_night(library, path, "2026-10-16").success
    with duckdb.connect(str(path), read_only=True) as connection:
        before = rows(
            connection, "SELECT eval_run_id, count(*) FROM retrieval_results GROUP BY 1 ORDER BY 1"
        )
    assert materialize_night(library, path, "2026-10-15").success
    with duckdb.connect(str(path), read_only=True) as connection:
        after = rows(
            connection, "SELECT eval_run_id, count(*) FROM retrieval_results GROUP BY 1 ORDER BY 1"
        )
        runs = rows(connection, "SELECT count(*) FROM eval_runs")[0][0]
        passages = rows(connection, "SELECT count(*) FROM corpus_passages")[0][0]
    assert before == after and len(after) == 2
    assert runs == 2
    assert passages == 9


def test_a_run_whose_report_fails_is_not_published(library, tmp_path, monkeypatch):
    """The report is written before the warehouse is published: a night whose report cannot be
    written (here its page fails; a kill there alike) is not complete in the warehouse, and no
    report or temporary page of it is left; the same night then completes with its report."""
    from rag_eval_pipeline.defs import eval_summary

    path = tmp_path / "warehouse" / "rag_eval.duckdb"
    reports = path.parent / "reports"
    assert materialize_night(library, path, "2026-10-15").success
    (earlier,) = list(reports.iterdir())

    def failing_page(*_args, **_kwargs):
        raise RuntimeError("the page could not be written")

    monkeypatch.setattr(eval_summary, "report_html", failing_page)
    assert not materialize_night(library, path, "2026-10-16").success
    query = "SELECT partition_date::VARCHAR, status, report_path FROM eval_runs ORDER BY 1"
    with duckdb.connect(str(path), read_only=True) as connection:
        runs = rows(connection, query)
    assert [(night, status) for night, status, _ in runs] == [("2026-10-15", "complete")]
    assert list(reports.iterdir()) == [earlier]

    monkeypatch.undo()
    assert materialize_night(library, path, "2026-10-16").success
    with duckdb.connect(str(path), read_only=True) as connection:
        runs = rows(connection, query)
    assert [status for _, status, _ in runs] == ["complete", "complete"]
    assert sorted(reports.iterdir()) == sorted(Path(report) for _, _, report in runs)


def test_a_publish_that_fails_while_the_report_is_drawn_leaves_no_page(
    library, tmp_path, monkeypatch
):
    """The warehouse copy cannot be written out (the disk is full) while the report is still
    being drawn: the night is not published, and the page the painter then writes is removed
    (it is joined before its temporary file is), so nothing is left beside the reports."""
    import os
    import time

    from rag_eval_pipeline.defs import eval_summary
    from rag_eval_pipeline.lib.store import warehouse as warehouse_module

    path = tmp_path / "warehouse" / "rag_eval.duckdb"
    reports = path.parent / "reports"
    assert materialize_night(library, path, "2026-10-15").success
    (earlier,) = list(reports.iterdir())
    drawn = eval_summary.write_report

    def slow_page(report_data, draft):
        time.sleep(0.5)  # still drawing when the publish fails
        return drawn(report_data, draft)

    class FullDisk:
        def __getattr__(self, name):
            return getattr(os, name)

        @staticmethod
        def fsync(_descriptor):
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(eval_summary, "write_report", slow_page)
    monkeypatch.setattr(warehouse_module, "os", FullDisk())
    assert not materialize_night(library, path, "2026-10-16").success
    monkeypatch.undo()
    assert list(reports.iterdir()) == [earlier]
    with duckdb.connect(str(path), read_only=True) as connection:
        nights = rows(connection, "SELECT partition_date::VARCHAR FROM eval_runs")
    assert nights == [("2026-10-15",)]


def test_the_citation_check_names_how_many_answers_and_which_items_cite_outside_the_context():
    import polars as pl

    from rag_eval_pipeline.defs.generation_run import invalid_citations_message

    invalid = pl.DataFrame({"item_id": [f"q{n}" for n in (7, 1, 3, 2, 9, 4, 8)]})
    assert invalid_citations_message(invalid, 190) == (
        "7 of 190 answers cite ids outside the context sent (or cite nothing): "
        "q1, q2, q3, q4, q7 and 2 more"
    )
    assert invalid_citations_message(invalid.head(0), 12) == (
        "all 12 answers cite only ids of the context sent"
    )


def test_the_ui_headline_says_not_measured_and_why_instead_of_dropping_a_figure():
    """A figure without a value (no judged claims) or without a row reads "not measured" and
    why in the asset's headline table, as in the printed summary; the others as numbers."""
    import polars as pl

    from rag_eval_pipeline.defs.metadata import markdown_headline

    frame = pl.DataFrame(
        {
            "metric": ["citation_validity", "faithfulness"],
            "value": [0.95, None],
            "ci_low": [0.9, None],
            "ci_high": [0.98, None],
            "n": [40, 0],
            "interval_method": ["wilson95", "bootstrap95"],
        }
    )
    table = markdown_headline(frame, "metric", ("faithfulness", "citation_validity", "token_f1"))
    assert table.splitlines()[2:] == [
        "| faithfulness | not measured (no judged claims) |  |  | 0 items |  |",
        "| citation_validity | 0.9500 | 0.9000 | 0.9800 | 40 items | wilson95 |",
        "| token_f1 | not measured (no reference answers) |  |  | 0 items |  |",
    ]


def test_the_ui_headline_gives_each_n_its_unit_claims_apart_from_items():
    """The generation headline puts item figures (faithfulness: 186 answers) beside claim rates
    (290 claims): a bare ``n`` column reads them as the same count. Each ``n`` carries its unit,
    as the printed summary's ``(n=290 claims)`` does."""
    import polars as pl

    from rag_eval_pipeline.defs.metadata import markdown_headline

    frame = pl.DataFrame(
        {
            "metric": ["faithfulness", "contradicted_claim_rate", "citation_support"],
            "value": [1.0, 0.0, 1.0],
            "ci_low": [0.98, 0.0, 0.987],
            "ci_high": [1.0, 0.0131, 1.0],
            "n": [186, 290, 1],
            "interval_method": ["wilson95"] * 3,
        }
    )
    names = ("faithfulness", "contradicted_claim_rate", "citation_support")
    table = markdown_headline(frame, "metric", names)
    assert table.splitlines()[2:] == [
        "| faithfulness | 1.0000 | 0.9800 | 1.0000 | 186 items | wilson95 |",
        "| contradicted_claim_rate | 0.0000 | 0.0000 | 0.0131 | 290 claims | wilson95 |",
        "| citation_support | 1.0000 | 0.9870 | 1.0000 | 1 claim | wilson95 |",
    ]
