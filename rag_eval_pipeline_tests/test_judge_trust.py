"""Trusting the judge: trace ids, source-aware labels, prediction-powered rates in the pipeline,
gates on the PPI bound, stability over repeats, claim diagnostics, and the bundled nightly.

The PPI rows are checked against an independent computation from the verdict and label rows (the
PPI++ formulas of Angelopoulos et al. written out here, not ``lib.judges.ppi``); the judge-only
rows against statsmodels' Wilson interval and ``generation_metrics``; the diagnostics against
values worked out by hand from RAGChecker's definitions with a scripted judge.
"""

import json
import math
from pathlib import Path

import dagster as dg
import duckdb
import numpy as np
import polars as pl
import pytest
from statsmodels.stats.proportion import proportion_confint

from rag_eval_pipeline.defs.resources import JudgeResource
from rag_eval_pipeline.lib.inputs.traces import TraceError, load_traces
from rag_eval_pipeline.lib.judges.calibration import (
    HumanLabelError,
    load_human_labels,
    matched_labels,
)
from rag_eval_pipeline.lib.judges.claims import split_claims
from rag_eval_pipeline.lib.judges.protocol import (
    CONTRADICTED,
    ENTAILED,
    UNSUPPORTED,
    Verdict,
)
from rag_eval_pipeline.lib.judges.run import judge_traces, passage_texts
from rag_eval_pipeline.lib.judges.stability import stability_rows, unstable_claims
from rag_eval_pipeline.lib.paths import project_root
from rag_eval_pipeline.lib.reporting.summary import format_summary, headline_from_tables
from rag_eval_pipeline.lib.runs.gates import (
    NOT_CALIBRATED,
    PASSED,
    Gate,
    evaluate_gates,
    read_gates,
)
from rag_eval_pipeline.testing import evaluation_assets, evaluation_resources, materialize_suite

from .conftest import FIXTURE_GATES, SUITE, fixture_resources

NIGHT = "2026-10-15"
Z95 = 1.959963984540054
V2_S1, V2_S2, V1_S2 = "LAB-LABEL-001@v2#s1", "LAB-LABEL-001@v2#s2", "LAB-LABEL-001@v1#s2"
FRIDGE_S1, FRIDGE_S2 = "STORE-FRIDGE-001@v1#s1", "STORE-FRIDGE-001@v1#s2"
CLEAN_S1, CLEAN_S2 = "CLEAN-LOG-001@v1#s1", "CLEAN-LOG-001@v1#s2"


def fixture_digest(library: Path) -> str:
    return json.loads((library / "2026-10-01" / "manifest.json").read_text())["corpus_digest"]


def trace(trace_id, answer, context, *, item_id=None, digest, refused=False) -> dict:
    cited = list(dict.fromkeys(c for claim in split_claims(answer) for c in claim.cited_ids))
    return {
        "trace_id": trace_id,
        "item_id": item_id,
        "question": f"question of {trace_id}",
        "retrieved": [
            {"passage_id": p, "score": 5.0 - r, "rank": r + 1} for r, p in enumerate(context)
        ],
        "context_ids": context,
        "answer": answer,
        "cited_ids": cited,
        "refused": refused,
        "refusal_reason": None,
        "system_version": "ward-assistant 9",
        "corpus_digest": digest,
    }


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def rows(path: Path, query: str, parameters: list | None = None) -> list[tuple]:
    with duckdb.connect(str(path), read_only=True) as connection:
        return connection.execute(query, parameters or []).fetchall()


def frame(path: Path, query: str) -> pl.DataFrame:
    with duckdb.connect(str(path), read_only=True) as connection:
        return connection.sql(query).pl()


# --- trace ids ------------------------------------------------------------------------------


def test_trace_id_is_the_key_then_item_id_then_file_and_line(tmp_path):
    digest = "0" * 64
    path = write_jsonl(
        tmp_path / "traces.jsonl",
        [
            trace("asst-1", "A. [X@v1#s1]", ["X@v1#s1"], item_id="q1", digest=digest),
            trace(None, "B. [X@v1#s1]", ["X@v1#s1"], item_id="q2", digest=digest),
            trace(None, "C. [X@v1#s1]", ["X@v1#s1"], digest=digest),
        ],
    )
    traces = load_traces(path)
    assert traces.select("trace_id", "item_id").rows() == [
        ("asst-1", "q1"),
        ("q2", "q2"),
        ("traces.jsonl:3", None),
    ]


def test_a_trace_id_used_twice_fails_naming_both_lines(tmp_path):
    digest = "0" * 64
    path = write_jsonl(
        tmp_path / "traces.jsonl",
        [
            trace("asst-1", "A. [X@v1#s1]", ["X@v1#s1"], digest=digest),
            trace("q7", "B. [X@v1#s1]", ["X@v1#s1"], digest=digest),
            # No trace_id: its key is its item_id, which is the second trace's trace_id.
            trace(None, "C. [X@v1#s1]", ["X@v1#s1"], item_id="q7", digest=digest),
        ],
    )
    with pytest.raises(TraceError, match=r"traces.jsonl:3: trace_id 'q7' already used at line 2"):
        load_traces(path)
    bad = write_jsonl(tmp_path / "bad.jsonl", [trace("", "A.", [], digest=digest)])
    with pytest.raises(TraceError, match=r"bad.jsonl:1: 'trace_id' must be a non-empty string"):
        load_traces(bad)


# --- source-aware labels --------------------------------------------------------------------


def test_labels_match_on_source_item_and_claim(tmp_path):
    path = write_jsonl(
        tmp_path / "labels.jsonl",
        [
            {"item_id": "q1", "claim": "A.", "verdict": "ENTAILED"},
            {
                "item_id": "q1",
                "source": "production",
                "claim": "A.",
                "verdict": "CONTRADICTED",
                "passage_id": "X@v1#s1",
                "citation_supported": False,
            },
        ],
    )
    labels = load_human_labels(path)
    assert labels.rows() == [
        ("golden", "q1", "A.", "ENTAILED", None, None),
        ("production", "q1", "A.", "CONTRADICTED", "X@v1#s1", False),
    ]
    verdicts = pl.DataFrame(
        {
            "source": ["golden", "production", "production"],
            "item_id": ["q1", "q1", "q1"],
            "claim": ["A.", "A.", "B."],
            "verdict": ["ENTAILED", "ENTAILED", "JUDGE_ERROR"],
        }
    )
    matched = matched_labels(verdicts, labels).sort("source")
    assert matched.select("source", "verdict", "human_verdict").rows() == [
        ("golden", "ENTAILED", "ENTAILED"),
        ("production", "ENTAILED", "CONTRADICTED"),
    ]


def test_labels_that_are_cut_off_or_not_utf8_name_the_line(tmp_path):
    cut = tmp_path / "cut.jsonl"
    cut.write_text('{"item_id": "q1", "claim": "A.", "verdict": "ENTAILED"}\n{"claim": "B', "utf-8")
    with pytest.raises(
        HumanLabelError,
        match=r"cut\.jsonl:2: malformed JSON: Unterminated string starting at column 11$",
    ):
        load_human_labels(cut)
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(
        b'{"item_id": "q1", "claim": "A.", "verdict": "ENTAILED"}\n{"claim": "caf\xe9"}\n'
    )
    with pytest.raises(HumanLabelError, match=r"latin\.jsonl:2: not UTF-8 text \(invalid"):
        load_human_labels(latin)


def test_bad_labels_fail_naming_the_line(tmp_path):
    twice = write_jsonl(
        tmp_path / "twice.jsonl",
        [{"item_id": "q1", "claim": "A.", "verdict": "ENTAILED"}] * 2,
    )
    with pytest.raises(HumanLabelError, match=r"twice.jsonl:2: .*already labelled at line 1"):
        load_human_labels(twice)
    source = write_jsonl(
        tmp_path / "source.jsonl",
        [{"item_id": "q1", "claim": "A.", "verdict": "ENTAILED", "source": "prod"}],
    )
    with pytest.raises(HumanLabelError, match=r"source.jsonl:1: source 'prod' is not one of"):
        load_human_labels(source)


# --- prediction-powered rates in the pipeline -----------------------------------------------


def production_traces(digest: str) -> list[dict]:
    """Production answers on the fixture library: copies (ENTAILED), changed numbers,
    paraphrases the lexical judge cannot follow, additions no passage states."""
    return [
        trace(
            "t01",
            f"Label every blood tube at the bedside within 15 minutes of collection. [{V2_S2}]",
            [V2_S2],
            item_id="q1",
            digest=digest,
        ),
        trace(
            "t02",
            f"Label every blood tube at the bedside within 60 minutes of collection. [{V2_S2}]",
            [V2_S2],
            digest=digest,
        ),
        trace(
            "t03",
            "The specimen fridge temperature is checked twice daily and recorded on form "
            f"STR-04. [{FRIDGE_S1}]",
            [FRIDGE_S1],
            item_id="q2",
            digest=digest,
        ),
        trace(
            "t04",
            f"Fridge readings go on form STR-04 twice a day. [{FRIDGE_S1}]",
            [FRIDGE_S1, FRIDGE_S2],
            digest=digest,
        ),
        trace(
            "t05",
            "Each clean is signed on the cleaning log CL-2, which the ward keeps for 12 "
            f"months. [{CLEAN_S2}]",
            [CLEAN_S2, CLEAN_S1],
            item_id="q3",
            digest=digest,
        ),
        trace(
            "t06", f"The commode log is held for a year. [{CLEAN_S2}]", [CLEAN_S2], digest=digest
        ),
        trace(
            "t07",
            "If the specimen fridge reads above 8 °C, move the specimens and call Estates on "
            f"ext 3000. [{FRIDGE_S2}]",
            [FRIDGE_S2],
            digest=digest,
        ),
        trace(
            "t08",
            "If the specimen fridge reads above 8 °C, move the specimens and call Estates on "
            f"ext 4000. [{FRIDGE_S2}]",
            [FRIDGE_S2],
            digest=digest,
        ),
        trace(
            "t09",
            f"Commodes are cleaned after every use with a detergent wipe. [{CLEAN_S1}] "
            f"Detergent wipes are stored in the sluice room. [{CLEAN_S1}]",
            [CLEAN_S1],
            digest=digest,
        ),
        trace(
            "t10", f"Unlabelled tubes are rejected by reception. [{V2_S2}]", [V2_S2], digest=digest
        ),
        trace("t11", f"Tubes without labels go back. [{V2_S2}]", [V2_S2], digest=digest),
        trace(
            "t12",
            f"Commodes are cleaned with a detergent wipe once a week. [{CLEAN_S1}]",
            [CLEAN_S1],
            digest=digest,
        ),
        trace("t13", "", [], digest=digest, refused=True),
    ]


# What a person reading each claim against its context says (t10 and t11 are not labelled; the
# fixture's golden answers are labelled without a source, so they are golden labels).
HUMAN = {
    "t01": [(ENTAILED, True)],
    "t02": [(CONTRADICTED, False)],
    "t03": [(ENTAILED, True)],
    "t04": [(ENTAILED, True)],
    "t05": [(ENTAILED, True)],
    "t06": [(ENTAILED, True)],
    "t07": [(ENTAILED, True)],
    "t08": [(CONTRADICTED, False)],
    "t09": [(ENTAILED, True), (UNSUPPORTED, False)],
    "t12": [(CONTRADICTED, False)],
}


def write_labels(path: Path, traces: list[dict], golden_answers: dict[str, str]) -> Path:
    lines = []
    for item_id, answer in golden_answers.items():
        for claim in split_claims(answer):
            lines.append({"item_id": item_id, "claim": claim.text, "verdict": ENTAILED})
    for record in traces:
        for claim, (verdict, supported) in zip(
            split_claims(record["answer"]), HUMAN.get(record["trace_id"], []), strict=False
        ):
            lines.append(
                {
                    "item_id": record["trace_id"],
                    "source": "production",
                    "claim": claim.text,
                    "verdict": verdict,
                    "citation_supported": supported,
                }
            )
    return write_jsonl(path, lines)


GOLDEN_ANSWERS = {
    "q1": f"Label every blood tube at the bedside within 15 minutes of collection. [{V2_S2}]",
    "q2": "The specimen fridge temperature is checked twice daily and recorded on form STR-04. "
    f"[{FRIDGE_S1}]",
    "q3": "Each clean is signed on the cleaning log CL-2, which the ward keeps for 12 months. "
    f"[{CLEAN_S2}]",
}


@pytest.fixture
def labelled_night(library, tmp_path):
    """The fixture night with production traces and human labels; returns the warehouse."""
    traces = production_traces(fixture_digest(library))
    store = write_jsonl(tmp_path / "production.jsonl", traces)
    labels = write_labels(tmp_path / "labels.jsonl", traces, GOLDEN_ANSWERS)
    warehouse = tmp_path / "w.duckdb"
    resources = fixture_resources(
        library, warehouse, human_labels=str(labels), trace_store=str(store)
    )
    result = materialize_suite(NIGHT, SUITE, resources, assets=evaluation_assets(FIXTURE_GATES))
    assert result.success
    return warehouse, labels, result


def independent_ppi_pp(f_unlabelled, f_labelled, y_labelled) -> tuple[float, float, float, float]:
    """PPI++ (Angelopoulos, Duchi, Zrnic 2023) written out: lambda, estimate, 95% interval."""
    f_u, f_l, y_l = (np.asarray(v, dtype=float) for v in (f_unlabelled, f_labelled, y_labelled))
    n, n_u = f_l.size, f_u.size
    f_all = np.concatenate([f_u, f_l])
    variance_all = f_all.var(ddof=1)
    if variance_all == 0:
        lam = 0.0
    else:
        covariance = ((y_l - y_l.mean()) * (f_l - f_l.mean())).sum() / (n - 1)
        lam = min(1.0, max(0.0, covariance / ((1 + n / n_u) * variance_all)))
    estimate = lam * f_u.mean() + (y_l - lam * f_l).mean()
    variance = lam**2 * f_u.var(ddof=1) / n_u + (y_l - lam * f_l).var(ddof=1) / n
    half = Z95 * math.sqrt(variance)
    return lam, estimate, max(0.0, estimate - half), min(1.0, estimate + half)


def test_ppi_rows_equal_an_independent_computation(labelled_night):
    warehouse, labels_path, _ = labelled_night
    verdicts = frame(
        warehouse,
        "SELECT item_id, claim, verdict, citation_supported FROM judge_verdicts "
        "WHERE source = 'production' AND verdict <> 'JUDGE_ERROR'",
    )
    labels = {
        (r["item_id"], r["claim"]): r
        for r in map(json.loads, labels_path.read_text().splitlines())
        if r.get("source") == "production"
    }
    estimates = {
        (r["metric"], r["method"]): r
        for r in frame(
            warehouse,
            "SELECT * FROM judge_rate_estimates WHERE scope = 'source' "
            "AND scope_value = 'production'",
        ).to_dicts()
    }
    claims = verdicts.to_dicts()
    assert len(claims) == 13
    checked = 0
    for metric, wanted in (
        ("faithful_claim_rate", ENTAILED),
        ("contradicted_claim_rate", CONTRADICTED),
        ("unsupported_claim_rate", UNSUPPORTED),
    ):
        f_u = [c["verdict"] == wanted for c in claims if (c["item_id"], c["claim"]) not in labels]
        pairs = [
            (c["verdict"] == wanted, labels[(c["item_id"], c["claim"])]["verdict"] == wanted)
            for c in claims
            if (c["item_id"], c["claim"]) in labels
        ]
        assert len(pairs) == 11 and len(f_u) == 2
        lam, estimate, low, high = independent_ppi_pp(f_u, *zip(*pairs, strict=True))
        row = estimates[(metric, "ppi++95")]
        assert (row["n_judged"], row["n_labelled"]) == (13, 11)
        assert row["ppi_lambda"] == pytest.approx(lam)
        assert row["value"] == pytest.approx(min(1.0, max(0.0, estimate)))
        if row["ci_low"] is not None:
            assert (row["ci_low"], row["ci_high"]) == (pytest.approx(low), pytest.approx(high))
            checked += 1
        judge = estimates[(metric, "judge_only_wilson95")]
        successes = sum(c["verdict"] == wanted for c in claims)
        wilson = proportion_confint(successes, 13, alpha=0.05, method="wilson")
        assert judge["value"] == pytest.approx(successes / 13)
        assert (judge["ci_low"], judge["ci_high"]) == tuple(pytest.approx(v) for v in wilson)
    assert checked >= 2
    # Faithfulness is a mean over items: an item is labelled when all its claims are.
    per_item: dict[str, list] = {}
    for c in claims:
        per_item.setdefault(c["item_id"], []).append(c)
    f_u, pairs = [], []
    for item_id, item_claims in sorted(per_item.items()):
        f = np.mean([c["verdict"] == ENTAILED for c in item_claims])
        keys = [(item_id, c["claim"]) for c in item_claims]
        if all(k in labels for k in keys):
            pairs.append((f, np.mean([labels[k]["verdict"] == ENTAILED for k in keys])))
        else:
            f_u.append(f)
    lam, estimate, low, high = independent_ppi_pp(f_u, *zip(*pairs, strict=True))
    row = estimates[("faithfulness", "ppi++95")]
    assert (row["unit"], row["n_judged"], row["n_labelled"]) == ("item", 12, 10)
    assert row["ppi_lambda"] == pytest.approx(lam)
    assert row["value"] == pytest.approx(min(1.0, max(0.0, estimate)))
    assert (row["ci_low"], row["ci_high"]) == (pytest.approx(low), pytest.approx(high))


def test_judge_only_faithfulness_is_the_generation_metrics_figure(labelled_night):
    warehouse, _, _ = labelled_night
    judge_only = rows(
        warehouse,
        "SELECT value, n_judged FROM judge_rate_estimates WHERE scope = 'overall' "
        "AND scope_value = 'answerable' AND metric = 'faithfulness' AND method LIKE 'judge%'",
    )
    generation = rows(
        warehouse,
        "SELECT value, n FROM generation_metrics WHERE scope = 'overall' "
        "AND scope_value = 'answerable' AND metric = 'faithfulness'",
    )
    assert judge_only == generation


def test_calibration_counts_golden_and_production_labels(labelled_night):
    warehouse, _, _ = labelled_night
    [(n, agreement, kappa)] = rows(warehouse, "SELECT n, agreement, kappa FROM judge_calibration")
    assert n == 3 + 11
    assert 0 < agreement < 1 and kappa is not None
    [(run_id,)] = rows(warehouse, "SELECT eval_run_id FROM eval_runs")
    with duckdb.connect(str(warehouse), read_only=True) as connection:
        text = format_summary(headline_from_tables(connection, run_id))
    assert "Judge calibration: judge not calibrated: 14 labelled claims matched, need 30" in text
    assert "(n=14 labelled claims)" in text
    assert "    source=production" in text and "11/13 claims" in text
    report = (warehouse.parent / "reports" / f"{run_id}.html").read_text(encoding="utf-8")
    assert "<h2>Trusting the judge</h2>" in report and "ppi++95" in report


def test_the_ui_estimates_table_has_every_column_the_auditors_guide_names(labelled_night):
    """``judge_calibration``'s ``judge_rate_estimates`` metadata: ``n_judged``, ``n_labelled``
    and ``ppi_lambda`` (AUDITORS.md, section 8) with the rows' values, and no "None" cells."""
    warehouse, _, result = labelled_night
    [materialization] = result.asset_materializations_for_node("judge_calibration")
    table = materialization.metadata["judge_rate_estimates"].value
    lines = table.splitlines()
    assert lines[0] == (
        "| scope | scope_value | metric | method | value | ci_low | ci_high | n_judged "
        "| n_labelled | unit | ppi_lambda | reason |"
    )
    assert "None" not in table
    [(n_judged, n_labelled, unit, lam)] = rows(
        warehouse,
        "SELECT n_judged, n_labelled, unit, ppi_lambda FROM judge_rate_estimates WHERE scope = "
        "'overall' AND scope_value = 'answerable' AND metric = 'faithfulness' AND method LIKE "
        "'ppi%'",
    )
    shown = next(
        line for line in lines if line.startswith("| overall | answerable | faithfulness | ppi")
    )
    cells = [cell.strip() for cell in shown.strip("|").split("|")]
    assert cells[7:11] == [str(n_judged), str(n_labelled), unit, f"{lam:.4f}"]


def test_the_ui_calibration_shows_every_scope_the_summary_prints_and_what_kappa_rests_on(
    labelled_night,
):
    """The summary prints the production traces' judge-based rates (``source=production``)
    and kappa with the agreement and the labelled claims it rests on; the asset page showed
    neither: only the golden set's answerable rates, and kappa without its n."""
    warehouse, _, result = labelled_night
    [materialization] = result.asset_materializations_for_node("judge_calibration")
    metadata = {key: getattr(v, "value", v) for key, v in materialization.metadata.items()}
    [(n, agreement, ci_low, ci_high)] = rows(
        warehouse, "SELECT n, agreement, ci_low, ci_high FROM judge_calibration"
    )
    assert metadata["labelled_claims"] == n
    assert metadata["agreement"] == agreement
    assert metadata["agreement_ci"] == f"{ci_low:.4f} to {ci_high:.4f} (wilson95)"
    table = metadata["judge_rate_estimates"]
    [(estimates,)] = rows(warehouse, "SELECT count(*) FROM judge_rate_estimates")
    assert len(table.splitlines()) == 2 + estimates
    assert "| source | production | faithfulness | " in table


# --- gates on the prediction-powered bound --------------------------------------------------


def gates_file(tmp_path: Path, min_labels: int) -> Path:
    path = tmp_path / f"gates_{min_labels}.yaml"
    path.write_text(
        f"version: 1\nmin_labels_for_ppi: {min_labels}\ngates:\n"
        "  - name: assistant_faithful\n"
        "    table: judge_rate_estimates\n"
        "    scope: source\n"
        "    scope_value: production\n"
        "    metric: faithful_claim_rate\n"
        "    statistic: ci_low\n"
        '    op: ">="\n'
        "    threshold: 0.10\n"
        "    needs_calibrated_judge: true\n",
        encoding="utf-8",
    )
    return path


PPI = pl.DataFrame(
    {
        "scope": ["overall"],
        "scope_value": ["answerable"],
        "metric": ["faithfulness"],
        "method": ["ppi++95"],
        "unit": ["item"],
        "value": [0.95],
        "ci_low": [0.91],
        "ci_high": [0.99],
        "n_judged": [120],
        "n_labelled": [30],
        "reason": [None],
    }
)
METRIC_ROWS = pl.DataFrame(
    {
        "table": ["generation_metrics"],
        "scope": ["overall"],
        "scope_value": ["answerable"],
        "metric": ["faithfulness"],
        "value": [0.5],
        "ci_low": [0.4],
        "ci_high": [0.6],
        "n": [120],
    }
)
FAITHFUL = Gate(
    "faithfulness",
    "",
    table="generation_metrics",
    metric="faithfulness",
    statistic="ci_low",
    threshold=0.9,
    needs_calibrated_judge=True,
)


def test_a_judge_gate_rests_on_the_ppi_bound_from_the_label_threshold():
    [at] = evaluate_gates(
        [FAITHFUL], METRIC_ROWS, judge_calibrated=False, judge_reason="kappa 0.2", ppi=PPI
    )
    assert at.status == PASSED and at.observed == 0.91
    assert "prediction-powered (ppi++95, 30 human-labelled items of 120 judged)" in at.message
    [below] = evaluate_gates(
        [FAITHFUL],
        METRIC_ROWS,
        judge_calibrated=False,
        judge_reason="kappa 0.2",
        ppi=PPI,
        min_labels_for_ppi=31,
    )
    assert below.status == NOT_CALIBRATED
    assert "30 human labels matched, the prediction-powered bound needs 31" in below.message
    # A calibrated judge below the label threshold keeps today's rule: the judge-only bound.
    [calibrated] = evaluate_gates(
        [FAITHFUL], METRIC_ROWS, judge_calibrated=True, ppi=PPI, min_labels_for_ppi=31
    )
    assert calibrated.observed == 0.4 and "prediction-powered" not in calibrated.message


def test_a_gate_without_a_ppi_interval_keeps_the_judge_rule():
    no_interval = PPI.with_columns(
        pl.lit(None, pl.Float64).alias("ci_low"), pl.lit("estimated variance is 0").alias("reason")
    )
    [result] = evaluate_gates(
        [FAITHFUL], METRIC_ROWS, judge_calibrated=False, judge_reason="kappa 0.2", ppi=no_interval
    )
    assert result.status == NOT_CALIBRATED
    assert "no prediction-powered ci_low: estimated variance is 0" in result.message


def test_pipeline_gate_switches_at_the_label_threshold(library, tmp_path):
    traces = production_traces(fixture_digest(library))
    store = write_jsonl(tmp_path / "production.jsonl", traces)
    labels = write_labels(tmp_path / "labels.jsonl", traces, GOLDEN_ANSWERS)
    messages = {}
    for min_labels in (11, 12):
        resources = fixture_resources(
            library, tmp_path / f"w{min_labels}.duckdb", human_labels=labels, trace_store=store
        )
        result = materialize_suite(
            NIGHT,
            SUITE,
            resources,
            assets=evaluation_assets(gates_file(tmp_path, min_labels)),
        )
        [check] = [
            c for c in result.get_asset_check_evaluations() if c.check_name.startswith("gate_")
        ]
        messages[min_labels] = check.metadata["message"].value
    assert "prediction-powered (ppi++95, 11 human-labelled claims of 13 judged)" in messages[11]
    assert "judge not calibrated" in messages[12]
    assert "11 human labels matched, the prediction-powered bound needs 12" in messages[12]
    assert read_gates(gates_file(tmp_path, 12)).min_labels_for_ppi == 12


# --- stability over repeats -----------------------------------------------------------------


class ScriptedJudge:
    """A judge that says what a script says: ``verdicts[(passage_id, claim)]`` for the first
    passage of the context that has a scripted ENTAILED, else CONTRADICTED if one has that, else
    UNSUPPORTED. Claims in ``flips`` get the opposite of ENTAILED / UNSUPPORTED on even repeats."""

    judge_id = "scripted"

    def __init__(self, verdicts: dict[tuple[str, str], str], flips: frozenset[str] = frozenset()):
        self.script = verdicts
        self.flips = flips
        self.calls: list[int] = []

    def config(self) -> dict:
        return {"judge_id": self.judge_id}

    def claims_batch(self, answers):
        return [split_claims(answer) for answer in answers]

    def _verdict(self, claim: str, context) -> Verdict:
        said = [(pid, self.script.get((pid, claim), UNSUPPORTED)) for pid, _ in context]
        for wanted in (ENTAILED, CONTRADICTED):
            for pid, verdict in said:
                if verdict == wanted:
                    return Verdict(verdict, pid)
        return Verdict(UNSUPPORTED, None)

    def verdicts(self, pairs):
        return self.repeat_verdicts(pairs, 1)

    def repeat_verdicts(self, pairs, repeat: int):
        self.calls.append(repeat)
        verdicts = [self._verdict(claim, context) for claim, context in pairs]
        if repeat % 2 == 0:
            flipped = {ENTAILED: UNSUPPORTED, UNSUPPORTED: ENTAILED}
            verdicts = [
                Verdict(flipped.get(v.verdict, v.verdict), None) if claim in self.flips else v
                for (claim, _), v in zip(pairs, verdicts, strict=True)
            ]
        return verdicts


class ScriptedJudgeResource(JudgeResource):
    """The scripted judge as a resource: ``script`` maps ``passage_id|claim`` to a verdict."""

    script: dict[str, str] = {}
    flips: list[str] = []

    def build(self, budget_share: float = 1.0):
        verdicts = {tuple(key.split("|", 1)): value for key, value in self.script.items()}
        return ScriptedJudge(verdicts, frozenset(self.flips))

    def config(self) -> dict:
        return {"judge_id": "scripted", "script": self.script, "flips": self.flips}


def test_repeats_find_the_claims_that_flip():
    sample = pl.DataFrame(
        {
            "item_id": ["a", "b", "c"],
            "answer": ["One. [P@v1#s1] Two. [P@v1#s1]", "Three. [P@v1#s1]", "Four. [P@v1#s1]"],
            "context_ids": [["P@v1#s1"]] * 3,
            "corpus_digest": ["d"] * 3,
            "source": ["golden", "golden", "production"],
        }
    )
    texts = {("d", "P@v1#s1"): "One. Two. Three. Four."}
    judge = ScriptedJudge(
        {("P@v1#s1", t): ENTAILED for t in ("One.", "Two.", "Three.", "Four.")},
        flips=frozenset({"Two.", "Four."}),
    )
    judged = judge_traces(judge, sample, texts, repeats=3)
    # Context verdicts and citation verdicts in one batch, then repeats 2 and 3.
    assert judge.calls == [1, 2, 3]
    assert judged.verdicts["verdict"].to_list() == [ENTAILED] * 4
    assert judged.repeats.height == 4 * 3
    flipped = unstable_claims(judged.repeats).filter(pl.col("changed"))
    assert flipped.select("item_id", "claim", "verdicts").rows() == [
        ("a", "Two.", [ENTAILED, UNSUPPORTED, ENTAILED]),
        ("c", "Four.", [ENTAILED, UNSUPPORTED, ENTAILED]),
    ]
    overall, golden, production = stability_rows(judged.repeats, 3)
    assert (overall["value"], overall["n_judged"]) == (0.5, 4)
    assert (golden["scope_value"], golden["value"]) == ("golden", pytest.approx(1 / 3))
    assert (production["scope_value"], production["value"]) == ("production", 1.0)
    low, high = proportion_confint(2, 4, alpha=0.05, method="wilson")
    assert (overall["ci_low"], overall["ci_high"]) == (pytest.approx(low), pytest.approx(high))
    [single] = stability_rows(judged.repeats.filter(pl.col("repeat") == 1), 1)
    assert single["value"] is None and "judge_repeats is 1" in single["reason"]


def test_the_pipeline_reports_unstable_claims_and_a_stability_gate(library, tmp_path):
    flip = "The specimen fridge temperature is checked twice daily and recorded on form STR-04."
    judge = ScriptedJudgeResource(
        script={
            f"{V2_S2}|Label every blood tube at the bedside within 15 minutes of collection.": (
                ENTAILED
            ),
            f"{FRIDGE_S1}|{flip}": ENTAILED,
            f"{CLEAN_S2}|Each clean is signed on the cleaning log CL-2, which the ward keeps "
            "for 12 months.": ENTAILED,
        },
        flips=[flip],
    )
    gates = tmp_path / "stable.yaml"
    gates.write_text(
        "version: 1\ngates:\n  - name: judge_stable\n    table: judge_rate_estimates\n"
        "    scope: overall\n    scope_value: all_judged\n    metric: judge_unstable_claim_rate\n"
        '    statistic: value\n    op: "<="\n    threshold: 0.2\n',
        encoding="utf-8",
    )
    warehouse = tmp_path / "w.duckdb"
    result = materialize_suite(
        NIGHT,
        SUITE,
        fixture_resources(library, warehouse, judge=judge, judge_repeats=2),
        assets=evaluation_assets(gates),
    )
    assert not result.success  # the stability gate fails: 1 of 3 claims flipped
    [check] = [
        c for c in result.get_asset_check_evaluations() if c.check_name == "gate_judge_stable"
    ]
    assert not check.passed
    assert "observed 0.3333, failed, short by 0.1333" in check.metadata["message"].value
    assert rows(
        warehouse,
        "SELECT value, n_judged FROM judge_rate_estimates WHERE metric = "
        "'judge_unstable_claim_rate' AND scope = 'overall'",
    ) == [(pytest.approx(1 / 3), 3)]
    assert rows(warehouse, 'SELECT count(*), max("repeat") FROM judge_repeat_verdicts') == [(6, 2)]
    # judge_verdicts keeps repeat 1.
    assert {v for (v,) in rows(warehouse, "SELECT verdict FROM judge_verdicts")} == {ENTAILED}
    with duckdb.connect(str(warehouse), read_only=True) as connection:
        [(run_id,)] = connection.sql("SELECT eval_run_id FROM eval_runs").fetchall()
        text = format_summary(headline_from_tables(connection, run_id))
    assert "judge_unstable_claim_rate 0.3333" in text
    assert f"golden q2#1: ENTAILED -> UNSUPPORTED  {flip[:67] + '...'!r}" in text


# --- claim diagnostics ----------------------------------------------------------------------


def diagnostic_traces(digest: str) -> list[dict]:
    return [
        # q1 (reference "within 15 minutes of collection"; gold v2#s2 grade 3, v1#s2 grade 1).
        trace(
            "d1",
            f"Label tubes within 60 minutes of collection. [{V1_S2}] "
            f"Unlabelled tubes are rejected by reception. [{V2_S2}]",
            [V2_S2, V1_S2],
            item_id="q1",
            digest=digest,
        ),
        # q3 (reference "12 months"; gold CLEAN s2 grade 3, s1 grade 2).
        trace(
            "d2",
            f"The ward keeps the cleaning log for 6 months. [{CLEAN_S2}] "
            f"The log hangs in the sluice room. [{CLEAN_S2}]",
            [CLEAN_S2, CLEAN_S1],
            item_id="q3",
            digest=digest,
        ),
        # q2 (reference "form STR-04"; gold FRIDGE s1 grade 3), answered from memory.
        trace("d3", f"Use form STR-04. [{FRIDGE_S2}]", [FRIDGE_S2], item_id="q2", digest=digest),
    ]


# The scripted judge's verdicts; every pair not listed is UNSUPPORTED.
DIAGNOSTIC_SCRIPT = {
    # d1: a1 follows the superseded version, contradicts the current one; a2 is current.
    f"{V1_S2}|Label tubes within 60 minutes of collection.": ENTAILED,
    f"{V2_S2}|Label tubes within 60 minutes of collection.": CONTRADICTED,
    f"{V2_S2}|Unlabelled tubes are rejected by reception.": ENTAILED,
    f"{V2_S2}|within 15 minutes of collection": ENTAILED,
    f"{V1_S2}|within 15 minutes of collection": CONTRADICTED,
    "answer|within 15 minutes of collection": CONTRADICTED,
    # d2: a1 contradicts the log passage; a2 no passage states; the reference is in s2.
    f"{CLEAN_S2}|The ward keeps the cleaning log for 6 months.": CONTRADICTED,
    f"{CLEAN_S2}|12 months": ENTAILED,
    "answer|12 months": CONTRADICTED,
    # d3: right per the reference, stated by no passage sent (self-knowledge).
    "reference#1|Use form STR-04.": ENTAILED,
    "answer|form STR-04": ENTAILED,
}

# Worked out by hand from RAGChecker's definitions (A answer claims, R reference claims, P
# passages; relevant = gold grade >= 2):
EXPECTED = {
    # d1: A=2 (both incorrect: the reference entails neither), R=1, P=2 (v2#s2 relevant).
    # claim recall 0 (the answer contradicts the reference claim); context claim recall 1
    # (v2#s2 entails it); context precision 1/2; utilisation 0/1; a1 is entailed only by the
    # irrelevant v1#s2, a2 by the relevant v2#s2: noise 1/2 and 1/2; faithfulness 2/2.
    "d1": {
        "precision": 0.0,
        "claim_recall": 0.0,
        "claim_missed_ans_contradicted": 1.0,
        "context_claim_recall": 1.0,
        "context_precision": 0.5,
        "context_utilisation": 0.0,
        "context_unused_ans_contradicted": 1.0,
        "noise_sensitivity_in_relevant": 0.5,
        "noise_sensitivity_in_irrelevant": 0.5,
        "hallucination": 0.0,
        "self_knowledge": 0.0,
        "faithfulness": 1.0,
    },
    # d2: A=2 incorrect and in no passage: hallucination 1 = 1/2 contradicted by the context
    # (a1) + 1/2 unsupported (a2); R=1 in context (s2), contradicted by the answer.
    "d2": {
        "precision": 0.0,
        "claim_recall": 0.0,
        "claim_missed_ans_contradicted": 1.0,
        "context_claim_recall": 1.0,
        "context_precision": 0.5,
        "context_utilisation": 0.0,
        "noise_sensitivity_in_relevant": 0.0,
        "noise_sensitivity_in_irrelevant": 0.0,
        "hallucination": 1.0,
        "hallucination_ctx_contradicted": 0.5,
        "hallucination_ctx_unsupported": 0.5,
        "self_knowledge": 0.0,
        "faithfulness": 0.0,
        "unfaithful_ctx_contradicted": 0.5,
    },
    # d3: A=1 correct and in no passage: self-knowledge 1; R=1 stated by the answer but in no
    # passage: claim recall 1, context claim recall 0, utilisation undefined (None).
    "d3": {
        "precision": 1.0,
        "claim_recall": 1.0,
        "context_claim_recall": 0.0,
        "context_claim_missed_ctx_unsupported": 1.0,
        "context_precision": 0.0,
        "context_utilisation": None,
        "hallucination": 0.0,
        "self_knowledge": 1.0,
        "self_knowledge_ctx_unsupported": 1.0,
        "faithfulness": 0.0,
    },
}


@pytest.fixture
def diagnosed_night(library, tmp_path):
    store = write_jsonl(tmp_path / "production.jsonl", diagnostic_traces(fixture_digest(library)))
    warehouse = tmp_path / "w.duckdb"
    judge = ScriptedJudgeResource(script=DIAGNOSTIC_SCRIPT)
    result = materialize_suite(
        NIGHT,
        SUITE,
        fixture_resources(library, warehouse, judge=judge, trace_store=str(store)),
        assets=evaluation_assets(FIXTURE_GATES),
    )
    assert result.success
    return warehouse


def test_diagnostics_per_item_are_the_hand_computed_values(diagnosed_night):
    found = {
        (item_id, metric): value
        for item_id, metric, value in rows(
            diagnosed_night,
            "SELECT item_id, metric, value FROM diagnostic_item_metrics WHERE source = "
            "'production'",
        )
    }
    for item_id, expected in EXPECTED.items():
        for metric, value in expected.items():
            assert found[(item_id, metric)] == (None if value is None else pytest.approx(value)), (
                item_id,
                metric,
            )
    golden = rows(
        diagnosed_night,
        "SELECT golden_item_id FROM diagnostic_item_metrics WHERE source = 'production' "
        "AND metric = 'precision' ORDER BY item_id",
    )
    assert golden == [("q1",), ("q3",), ("q2",)]


def test_diagnostic_means_recomputed_from_the_verdict_rows(diagnosed_night):
    verdicts = frame(
        diagnosed_night,
        "SELECT source, item_id, subject, claim_index, against, passage_id, verdict "
        "FROM diagnostic_verdicts",
    ).to_dicts()
    grades = {
        "q1": {V2_S2: 3, V1_S2: 1},
        "q2": {FRIDGE_S1: 3},
        "q3": {CLEAN_S2: 3, CLEAN_S1: 2},
    }
    golden_of = {"d1": "q1", "d2": "q3", "d3": "q2"}
    recall, hallucination, precision_of_context = [], [], []
    for item_id in ("d1", "d2", "d3"):
        mine = [v for v in verdicts if v["item_id"] == item_id]
        references = {v["claim_index"] for v in mine if v["subject"] == "reference_claim"}
        stated = {
            v["claim_index"]
            for v in mine
            if v["subject"] == "reference_claim"
            and v["against"] == "answer"
            and v["verdict"] == ENTAILED
        }
        recall.append(len(stated) / len(references))
        answers = {v["claim_index"] for v in mine if v["subject"] == "answer_claim"}
        correct = {
            v["claim_index"]
            for v in mine
            if v["subject"] == "answer_claim"
            and v["against"] == "reference"
            and v["verdict"] == ENTAILED
        }
        in_context = {
            v["claim_index"]
            for v in mine
            if v["subject"] == "answer_claim"
            and v["against"] == "passage"
            and v["verdict"] == ENTAILED
        }
        hallucination.append(len(answers - correct - in_context) / len(answers))
        passages = {v["passage_id"] for v in mine if v["against"] == "passage"}
        useful = {
            v["passage_id"]
            for v in mine
            if v["subject"] == "reference_claim"
            and v["against"] == "passage"
            and v["verdict"] == ENTAILED
        }
        precision_of_context.append(len(useful) / len(passages))
        assert set(grades[golden_of[item_id]]) >= useful
    means = {
        metric: value
        for metric, value in rows(
            diagnosed_night,
            "SELECT metric, value FROM diagnostic_metrics WHERE scope_value = 'production'",
        )
    }
    assert means["claim_recall"] == pytest.approx(np.mean(recall))
    assert means["hallucination"] == pytest.approx(np.mean(hallucination))
    assert means["context_precision"] == pytest.approx(np.mean(precision_of_context))
    assert means["items_with_judge_errors"] == 0


# --- the bundled nightly --------------------------------------------------------------------


def test_bundled_nightly_has_real_calibration_and_ppi_rows(tmp_path):
    warehouse = tmp_path / "rag_eval.duckdb"
    resources = evaluation_resources(suites=project_root() / "suites", warehouse=warehouse)
    result = materialize_suite(
        "2026-11-15", "procedures", resources, instance=dg.DagsterInstance.ephemeral()
    )
    assert result.success
    [(n, agreement, kappa, calibrated)] = rows(
        warehouse, "SELECT n, agreement, kappa, calibrated FROM judge_calibration"
    )
    assert n >= 250 and 0.3 < agreement < 0.95 and kappa is not None and 0 < kappa < 0.6
    assert calibrated is False
    production = {
        method: (value, low, high, n_labelled)
        for method, value, low, high, n_labelled in rows(
            warehouse,
            "SELECT method, value, ci_low, ci_high, n_labelled FROM judge_rate_estimates "
            "WHERE scope = 'source' AND scope_value = 'production' AND metric = 'faithfulness'",
        )
    }
    judge_value, *_ = production["judge_only_bootstrap95"]
    ppi_value, ppi_low, ppi_high, labelled = production["ppi++95"]
    # The lexical judge misses paraphrase: people find far more of the assistant's claims
    # entailed than it does.
    assert labelled >= 250 and ppi_low < ppi_value < ppi_high
    assert ppi_value - judge_value > 0.2
    [gate] = [
        c for c in result.get_asset_check_evaluations() if c.check_name == "gate_faithfulness"
    ]
    assert gate.passed
    assert "prediction-powered (ppi++95" in gate.metadata["message"].value
    diagnosed = rows(
        warehouse,
        "SELECT scope_value, n_items FROM diagnostic_metrics WHERE metric = 'claim_recall' "
        "ORDER BY scope_value",
    )
    assert [source for source, _ in diagnosed] == ["golden", "production"]
    assert all(n_items > 100 for _, n_items in diagnosed)


def test_passage_texts_are_the_texts_of_each_corpus_state_taken_when_looked_up():
    """``passage_texts`` maps ``(corpus_digest, passage_id)`` to the text, as a dict of every
    row would: the same keys and texts, a key given twice keeps its last row, an id of another
    state is not in it, and a missing key raises ``KeyError``; a text is taken from the frame
    only when looked up."""
    passages = pl.DataFrame(
        {
            "corpus_digest": ["d1", "d1", "d2", "d2"],
            "passage_id": ["P@v1#s1", "P@v1#s2", "P@v1#s1", "P@v1#s2"],
            "text": ["old wording", "kept at 2-8 °C", "new wording", "replaced"],
            "title": ["t"] * 4,
        }
    )
    passages = pl.concat([passages, passages.tail(1).with_columns(text=pl.lit("last row"))])
    texts = passage_texts(passages)
    assert not texts._taken  # no text is made a Python string before it is looked up
    every_row = {
        (d, p): t for d, p, t in passages.select("corpus_digest", "passage_id", "text").rows()
    }
    assert len(texts) == len(every_row) == 4
    assert dict(texts) == every_row
    assert texts[("d2", "P@v1#s2")] == "last row"
    assert texts[("d1", "P@v1#s1")] == "old wording" and texts[("d2", "P@v1#s1")] == "new wording"
    assert ("d1", "P@v1#s2") in texts and ("d3", "P@v1#s1") not in texts
    assert ("d1", "P@v1#s9") not in texts
    with pytest.raises(KeyError):
        texts[("d3", "P@v1#s1")]
