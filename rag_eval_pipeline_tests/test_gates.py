"""Release gates: the file, their evaluation, and a failing gate failing `rag-eval nightly`."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import polars as pl
import pytest
import yaml

from rag_eval_pipeline.lib.runs.gates import (
    CATALOGUE,
    FAILED,
    NOT_CALIBRATED,
    PASSED,
    GateFileError,
    check_cutoffs,
    evaluate_gates,
    load_gates,
    metric_problem,
    read_gates,
)

from .conftest import materialize_night

ROOT = Path(__file__).resolve().parents[1]

METRICS = pl.DataFrame(
    {
        "table": ["retrieval_metrics", "generation_metrics", "generation_metrics"],
        "scope": ["overall", "overall", "overall"],
        "scope_value": ["answerable", "answerable", "answerable"],
        "metric": ["Success@5", "confident_wrong_rate", "faithfulness"],
        "value": [0.76, 0.19, 0.93],
        "ci_low": [0.6960, 0.1417, 0.90],
        "ci_high": [0.8140, 0.2500, 0.96],
        "n": [200, 200, 60],
    }
)


def test_bundled_gate_files_load():
    for name in ("release_gates.yaml", "case_study_targets.yaml"):
        version, gates = load_gates(ROOT / "gates" / name)
        assert version == 1 and gates


def test_gates_test_bounds_and_say_by_how_much():
    _, gates = load_gates(ROOT / "gates" / "case_study_targets.yaml")
    results = {r.gate.name: r for r in evaluate_gates(gates, METRICS, judge_calibrated=True)}
    # Success@5 lower bound 0.6960 against 0.85: short by 0.154.
    assert results["success_at_5"].status == FAILED
    assert results["success_at_5"].margin == pytest.approx(0.6960 - 0.85)
    assert "short by 0.1540" in results["success_at_5"].message
    assert results["faithfulness"].status == PASSED


def test_a_judge_gate_without_calibration_does_not_pass():
    _, gates = load_gates(ROOT / "gates" / "case_study_targets.yaml")
    results = {
        r.gate.name: r
        for r in evaluate_gates(gates, METRICS, judge_calibrated=False, judge_reason="no labels")
    }
    assert results["faithfulness"].status == NOT_CALIBRATED
    assert not results["faithfulness"].passed
    assert "judge not calibrated" in results["faithfulness"].message
    # Not assessed is not measured: the uncalibrated judge's 0.90 is not the gate's figure.
    assert results["faithfulness"].observed is None and results["faithfulness"].margin is None
    assert results["success_at_5"].observed == pytest.approx(0.6960)
    # The calibration's own reason begins with the same words: they are said once.
    worded = evaluate_gates(
        gates,
        METRICS,
        judge_calibrated=False,
        judge_reason="judge not calibrated: no human labels",
    )
    message = next(r.message for r in worded if r.gate.name == "faithfulness")
    assert message.startswith("faithfulness: judge not calibrated (no human labels); "), message


def test_a_judge_gate_over_a_failing_judge_fails_without_a_figure():
    _, gates = load_gates(ROOT / "gates" / "case_study_targets.yaml")
    errors = pl.DataFrame(
        {
            "table": ["generation_metrics"],
            "scope": ["overall"],
            "scope_value": ["answerable"],
            "metric": ["judge_error_rate"],
            "value": [0.25],
            "ci_low": [0.2],
            "ci_high": [0.3],
            "n": [60],
        }
    )
    results = {
        r.gate.name: r
        for r in evaluate_gates(gates, pl.concat([METRICS, errors]), judge_calibrated=True)
    }
    faithfulness = results["faithfulness"]
    assert faithfulness.status == FAILED and "the judge failed on 25.0% of the claims" in (
        faithfulness.message
    )
    assert faithfulness.observed is None and faithfulness.margin is None
    assert results["success_at_5"].observed == pytest.approx(0.6960)


def test_gate_file_errors_name_the_gate(tmp_path):
    path = tmp_path / "gates.yaml"
    path.write_text("version: 1\ngates:\n  - name: ok_gate\n    table: nowhere\n    metric: x\n")
    with pytest.raises(GateFileError, match=r"gates.yaml: gate 1 \(ok_gate\): 'table' must be"):
        load_gates(path)
    path.write_text(
        "version: 1\ngates:\n  - name: g\n    table: retrieval_metrics\n    metric: x\n    op: '>'\n"
    )
    with pytest.raises(GateFileError, match=r"gate 1 \(g\): 'op' must be"):
        load_gates(path)


def test_failing_gates_make_nightly_exit_non_zero(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "RAG_EVAL_WAREHOUSE": str(tmp_path / "w.duckdb"),
        "RAG_EVAL_GATES": "gates/case_study_targets.yaml",
    }
    completed = subprocess.run(
        [
            str(Path(sys.executable).parent / "rag-eval"),
            "nightly",
            "--partition",
            "2026-10-15",
            "--no-summary",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert completed.returncode == 1, completed.stderr
    assert "\nrelease gates failed in nightly_eval (Dagster run " in completed.stderr
    assert completed.stderr.count("release gates failed") == 1
    assert "gate_success_at_5: success_at_5: Success@5 95% lower bound" in completed.stderr
    assert "short by" in completed.stderr


def gates_file(tmp_path: Path, **fields) -> Path:
    """A gates file of one Success@5 gate, its fields replaced or added by ``fields``."""
    gate = {
        "name": "success_at_5",
        "table": "retrieval_metrics",
        "scope": "overall",
        "scope_value": "answerable",
        "metric": "Success@5",
        "statistic": "ci_low",
        "op": ">=",
        "threshold": 0.6,
        **fields,
    }
    path = tmp_path / "gates.yaml"
    path.write_text(yaml.safe_dump({"version": 1, "gates": [gate]}), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("threshold", "high", "'threshold' must be a number, got 'high'"),
        ("threshold", True, "'threshold' must be a number, got True"),
        (
            "needs_calibrated_judge",
            "yes",
            "'needs_calibrated_judge' must be true or false, got 'yes'",
        ),
        ("needs_calibrated_judge", 1, "'needs_calibrated_judge' must be true or false, got 1"),
        ("scope_value", 2, "'scope_value' must be text, got 2"),
    ],
)
def test_a_gate_field_of_the_wrong_type_is_refused_naming_the_gate(tmp_path, field, value, said):
    # YAML reads `threshold: high` as text (a ValueError in describe at the end of a night) and
    # `threshold: true` as a bool, which compares as 1.
    path = gates_file(tmp_path, **{field: value})
    with pytest.raises(GateFileError) as raised:
        read_gates(path)
    assert str(raised.value) == f"{path}: gate 1 (success_at_5): {said}"


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"metric": "Sucess@5"}, "'metric' 'Sucess@5' is not a metric of retrieval_metrics"),
        ({"metric": "AP@5"}, "'metric' 'AP@5' is not a metric of retrieval_metrics"),
        ({"metric": "R@0"}, "'metric' 'R@0' is not a metric of retrieval_metrics"),
        ({"scope": "overal"}, "'scope' 'overal' is not a scope of retrieval_metrics"),
        ({"scope_value": "all_items"}, "'scope_value' 'all_items' is not a value of scope overall"),
        (
            {"table": "generation_metrics", "metric": "latency_p95_ms"},
            "'metric' 'latency_p95_ms' is not a metric of generation_metrics in scope overall",
        ),
        (
            {"table": "generation_metrics", "scope": "operations", "scope_value": "answerable"},
            "'scope_value' 'answerable' is not a value of scope operations",
        ),
        (
            {"table": "judge_rate_estimates", "scope": "source", "scope_value": "prod"},
            "'scope_value' 'prod' is not a value of scope source in judge_rate_estimates",
        ),
    ],
)
def test_a_gate_on_a_row_no_run_has_is_refused_rather_than_never_enforced(tmp_path, fields, said):
    path = gates_file(tmp_path, **fields)
    with pytest.raises(GateFileError, match=r"gate 1 \(success_at_5\): ") as raised:
        read_gates(path)
    assert said in str(raised.value)


@pytest.mark.parametrize(
    "fields",
    [
        {"metric": "Stale@3"},
        {"metric": "nDCG_exp@20", "scope": "language", "scope_value": "de"},
        {"metric": "AP", "scope": "stratum", "scope_value": "any_stratum_of_a_golden_set"},
        {
            "table": "generation_metrics",
            "scope": "operations",
            "scope_value": "all_items",
            "metric": "latency_p95_ms",
        },
        {
            "table": "generation_metrics",
            "scope": "guardrail",
            "scope_value": "all_items",
            "metric": "input_check_override_blocked",
        },
        {"table": "generation_metrics", "scope_value": "all_items", "metric": "squad_f1"},
    ],
)
def test_gates_on_rows_some_run_has_are_read(tmp_path, fields):
    [gate] = read_gates(gates_file(tmp_path, **fields)).gates
    assert gate.metric == fields["metric"]


def test_every_metric_row_of_a_night_is_one_a_gate_may_name(library, tmp_path):
    """The rows a gate may name (``CATALOGUE``) hold every row a real night writes: a measure
    added to a registry without the catalogue knowing it would be refused in a gates file."""
    warehouse = tmp_path / "w.duckdb"
    assert materialize_night(library, warehouse, judge_repeats=2).success
    with duckdb.connect(str(warehouse), read_only=True) as connection:
        night = connection.sql(
            "SELECT DISTINCT 'retrieval_metrics', scope, scope_value, measure "
            "FROM retrieval_metrics UNION ALL "
            "SELECT DISTINCT 'generation_metrics', scope, scope_value, metric "
            "FROM generation_metrics UNION ALL "
            "SELECT DISTINCT 'judge_rate_estimates', scope, scope_value, metric "
            "FROM judge_rate_estimates"
        ).fetchall()
    assert {table for table, *_ in night} == set(CATALOGUE)
    assert {row: metric_problem(*row) for row in night if metric_problem(*row)} == {}
    assert {scope for _, scope, *_ in night} >= {"overall", "stratum", "language", "operations"}


@pytest.mark.parametrize(
    ("written", "problem"),
    [
        ({"threshold": "high"}, "'threshold' must be a number, got 'high'"),
        # Valid read alone; with the night's cut-offs the gate would never be assessed.
        ({"metric": "Success@50"}, "Success@50 is not computed by this run (cut-offs 1, 3, 5, 10)"),
    ],
)
def test_nightly_refuses_a_bad_gates_file_before_any_step(tmp_path, written, problem):
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")
    warehouse = tmp_path / "w" / "w.duckdb"
    gates = gates_file(tmp_path, **written)
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "RAG_EVAL_WAREHOUSE": str(warehouse),
        "RAG_EVAL_GATES": str(gates),
    }
    completed = subprocess.run(
        [str(Path(sys.executable).parent / "rag-eval"), "nightly", "--partition", "2026-10-15"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert completed.returncode == 2, completed.stderr
    assert completed.stderr == f"error: {gates}: gate 1 (success_at_5): {problem}\n"
    assert not warehouse.parent.exists()


@pytest.mark.parametrize(
    ("metric", "cutoffs", "refused"),
    [
        ("Success@20", (1, 3, 5, 10), True),
        ("Stale@50", (1, 3, 5, 10), True),
        ("Success@20", (1, 5, 20), False),
        ("nDCG@10", (1, 3, 5, 10), False),
        ("AP", (1, 3, 5, 10), False),
    ],
)
def test_a_gate_at_a_cut_off_the_run_does_not_compute_is_refused(
    tmp_path, metric, cutoffs, refused
):
    # Read alone the file is valid (some run computes Success@20); with the run's cut-offs it
    # is not, as its gate would be "not assessed" on every night.
    gates = read_gates(gates_file(tmp_path, metric=metric))
    if not refused:
        check_cutoffs(gates, cutoffs)
        return
    with pytest.raises(GateFileError) as raised:
        check_cutoffs(gates, cutoffs)
    computed = ", ".join(map(str, cutoffs))
    assert str(raised.value) == (
        f"{gates.path}: gate 1 (success_at_5): {metric} is not computed by this run "
        f"(cut-offs {computed})"
    )


@pytest.mark.parametrize("cutoffs", [None, [1, 5, 20]], ids=["default-cutoffs", "cutoff-20"])
def test_a_launched_night_fails_a_gate_at_a_cut_off_it_does_not_compute(library, tmp_path, cutoffs):
    """A night the daemon or the UI launches (not ``rag-eval nightly``, which refuses it first)
    fails where the run begins, before the system is asked anything and with no run record,
    when a gate is at a cut-off its settings do not compute; with the cut-off in its settings
    the night begins."""
    from rag_eval_pipeline.lib.runs.lifecycle import RECORD_FILE
    from rag_eval_pipeline.testing import evaluation_assets, materialize_suite, names

    from .conftest import NIGHT, SUITE, fixture_resources

    gates = gates_file(tmp_path, metric="Success@20")
    warehouse = tmp_path / "w.duckdb"
    settings = {} if cutoffs is None else {"cutoffs": cutoffs}
    every = evaluation_assets(gates)
    result = materialize_suite(
        NIGHT,
        SUITE,
        fixture_resources(library, warehouse, **settings),
        assets=every,
        selection=[
            a for a in every if {"corpus_snapshot", "golden_set", "retrieval_run"} & names(a)
        ],
    )
    failures = [event for event in result.all_events if event.is_step_failure]
    if cutoffs is not None:
        assert result.success, failures
        assert len(list(tmp_path.glob(f"store/**/{RECORD_FILE}"))) == 1
        return
    [failure] = failures
    assert failure.step_key == "retrieval_run.plan_retrieval"
    error = failure.event_specific_data.error
    message = "".join(part.message for part in (error, error.cause) if part is not None)
    assert (
        f"{gates}: gate 1 (success_at_5): Success@20 is not computed by this run "
        "(cut-offs 1, 3, 5, 10)"
    ) in message
    assert not list(tmp_path.glob(f"store/**/{RECORD_FILE}"))


def _readme_block(after: str, language: str) -> str:
    """The first ```language block of the README after the line containing ``after``."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index(f"```{language}\n", text.index(after)) + len(language) + 4
    return (
        "\n".join(
            line.strip() if language == "json" else line[3:]
            for line in (text[start : text.index("```", start)].rstrip("\n").split("\n"))
        )
        + "\n"
    )


def test_the_readmes_own_suite_examples_are_what_the_readers_accept(tmp_path):
    """The golden lines and the small suite's gates file of "Evaluating your own corpus and
    golden set", pasted as they are shown, read without an error."""
    from rag_eval_pipeline.lib.inputs.golden import parse_golden_lines

    golden = _readme_block("Write the golden set", "json")
    records = parse_golden_lines(golden, "golden.jsonl")
    assert [record["stratum"] for _, record in records] == ["answerable", "out_of_scope"]
    gates_file = tmp_path / "mine.yaml"
    gates_file.write_text(_readme_block("For a small suite write a gates file", "yaml"), "utf-8")
    version, gates = load_gates(gates_file)
    assert version == 1 and [g.name for g in gates] == [
        "success_at_5",
        "refuses_no_answer",
        "no_significant_regression",
    ]
    assert {g.statistic for g in gates if g.table} == {"value"}
