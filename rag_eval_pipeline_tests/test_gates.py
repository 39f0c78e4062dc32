"""Release gates: the file, their evaluation, and a failing gate failing `rag-eval nightly`."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from rag_eval_pipeline.lib.runs.gates import (
    FAILED,
    NOT_CALIBRATED,
    PASSED,
    GateFileError,
    evaluate_gates,
    load_gates,
)

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
    # The calibration's own reason begins with the same words: they are said once.
    worded = evaluate_gates(
        gates,
        METRICS,
        judge_calibrated=False,
        judge_reason="judge not calibrated: no human labels",
    )
    message = next(r.message for r in worded if r.gate.name == "faithfulness")
    assert message.startswith("faithfulness: judge not calibrated (no human labels); "), message


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
