"""The rag-eval command line, run as a user runs it: a subprocess against temporary files."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .conftest import fixture_suites

ROOT = Path(__file__).resolve().parents[1]
RAG_EVAL = str(Path(sys.executable).parent / "rag-eval")


def rag_eval(*arguments: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [RAG_EVAL, *arguments],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
    )


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_evaluate_run_prints_like_trec_eval_and_json(tmp_path):
    qrels = write(tmp_path / "qrels", "q1 0 a 2\nq1 0 b 1\nq2 0 c 1\nq3 0 x 0\n")
    run = write(
        tmp_path / "run",
        "q1 Q0 b 1 3.0 t\nq1 Q0 a 2 2.0 t\nq1 Q0 z 3 1.0 t\nq2 Q0 y 1 5.0 t\nq2 Q0 c 2 5.0 t\n",
    )
    completed = rag_eval(
        "evaluate-run", str(qrels), str(run), "-m", "RR", "-m", "P@2", "--per-query"
    )
    assert completed.returncode == 0, completed.stderr
    lines = {
        tuple(line.split("\t")[:2]): line.split("\t")[2] for line in completed.stdout.splitlines()
    }
    # q1: b (grade 1, relevant at level 1) first -> RR 1; q2: tie at 5.0, trec_eval puts y
    # (doc id descending) before c -> RR 1/2. q3 has nothing relevant and is left out.
    assert lines[("RR".ljust(24), "q1")] == "1.0000"
    assert lines[("RR".ljust(24), "q2")] == "0.5000"
    assert lines[("RR".ljust(24), "all")] == "0.7500"
    assert lines[("P@2".ljust(24), "all")] == "0.7500"
    report = json.loads(
        rag_eval(
            "evaluate-run", str(qrels), str(run), "-m", "RR", "--rel-level", "2", "--json"
        ).stdout
    )
    assert report["RR"]["value"] == pytest.approx(0.5)  # q1: a (grade 2) at rank 2; q2 excluded
    assert report["RR"]["n"] == 1 and report["excluded_queries"]["value"] == 2
    assert report["RR"]["ci_low"] is not None


@pytest.mark.parametrize(
    ("run_text", "message"),
    [
        ("q1 Q0 a 1 2.0\n", "run:1: found 5 fields, expected 6"),
        ("q1 Q0 a 1 high t\n", "run:1: score 'high'"),
        ("q1 Q0 a 1 2.0 t\nq1 Q0 a 2 1.0 t\n", "run:2: duplicate"),
    ],
)
def test_evaluate_run_rejects_bad_run_lines(tmp_path, run_text, message):
    qrels = write(tmp_path / "qrels", "q1 0 a 1\n")
    run = write(tmp_path / "run", run_text)
    completed = rag_eval("evaluate-run", str(qrels), str(run))
    assert completed.returncode == 2
    assert message in completed.stderr


def test_qrels_grade_that_is_not_an_integer(tmp_path):
    qrels = write(tmp_path / "qrels", "q1 0 a 1\nq1 0 b 1.5\n")
    run = write(tmp_path / "run", "q1 Q0 a 1 2.0 t\n")
    completed = rag_eval("evaluate-run", str(qrels), str(run))
    assert completed.returncode == 2
    assert "qrels:2:" in completed.stderr and "1.5" in completed.stderr


def test_import_nightly_history_compare_and_export_on_the_fixture(library, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")
    # Three answerable items give intervals too wide for the bundled gates; gate on regression only.
    gates = write(
        tmp_path / "gates.yaml", "version: 1\ngates:\n  - name: no_significant_regression\n"
    )
    env = {
        "DAGSTER_HOME": str(home),
        "RAG_EVAL_WAREHOUSE": str(tmp_path / "w.duckdb"),
        "RAG_EVAL_GATES": str(gates),
        "RAG_EVAL_SUITES": str(fixture_suites(library)),
    }
    config = tmp_path / "run.yaml"
    config.write_text(
        yaml.safe_dump({"resources": {"system": {"config": {"evidence_threshold": 1.0}}}})
    )
    first = rag_eval(
        "nightly",
        "--suite",
        "golden",
        "--partition",
        "2026-10-15",
        "--config",
        str(config),
        env=env,
    )
    assert first.returncode == 0, first.stderr
    assert "is the baseline of golden" in first.stdout
    assert "Success@5" in first.stdout
    second = rag_eval(
        "nightly",
        "--suite",
        "golden",
        "--partition",
        "2026-10-16",
        "--config",
        str(config),
        "--no-summary",
        env=env,
    )
    assert second.returncode == 0, second.stderr
    assert "is comparable with baseline" in second.stdout
    assert "Success@5        1.0000 vs 1.0000  delta +0.0000" in second.stdout
    history = rag_eval("history", "--metric", "Success@5", env=env)
    assert history.returncode == 0
    rows = [
        line
        for line in history.stdout.splitlines()
        if line[:1] in ("*", " ") and "2026-10-1" in line
    ]
    assert len(rows) == 2 and rows[0].startswith("* 2026-10-15")
    run_a, run_b = (row.split()[-3] for row in reversed(rows))
    compare = rag_eval("compare", run_a, run_b, env=env)
    assert compare.returncode == 0 and "same corpus digest" in compare.stdout
    exported = tmp_path / "run.trec"
    assert rag_eval("export-run", run_b, str(exported), env=env).returncode == 0
    first_line = exported.read_text().splitlines()[0].split()
    assert first_line[1] == "Q0" and first_line[3] == "1" and "@v" in first_line[2]
    accepted = rag_eval(
        "accept-baseline", run_a, "--reason", "threshold review", "--requested-by", "qa", env=env
    )
    assert accepted.returncode == 0 and f"previous: {run_b}" in accepted.stdout
    history = rag_eval("history", env=env).stdout
    assert any(line.startswith("* 2026-10-16") for line in history.splitlines())
    refused = rag_eval("rebaseline", "--partition", "2026-10-17", "--reason", " ", env=env)
    assert refused.returncode == 2 and "needs a reason" in refused.stderr


def test_import_rejects_bad_beir_input(tmp_path):
    folder = tmp_path / "beir"
    (folder / "qrels").mkdir(parents=True)
    write(folder / "corpus.jsonl", '{"_id": "d1", "title": "t", "text": "x"}\n{"_id": "d2", \n')
    write(folder / "queries.jsonl", '{"_id": "q1", "text": "x"}\n')
    write(folder / "qrels" / "test.tsv", "query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    completed = rag_eval(
        "import",
        "beir",
        str(folder),
        "--suite",
        "beir-bad",
        "--snapshot-dir",
        str(tmp_path / "s" / "2026-01-01"),
        "--golden",
        str(tmp_path / "g.jsonl"),
        env={"RAG_EVAL_SUITES": str(tmp_path / "suites")},
    )
    assert completed.returncode == 2
    assert "corpus.jsonl:2" in completed.stderr
    assert not (tmp_path / "suites" / "beir-bad.yaml").exists()
    assert not (tmp_path / "s" / "2026-01-01").exists() and not (tmp_path / "g.jsonl").exists()
