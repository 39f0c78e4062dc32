"""The rag-eval command line, run as a user runs it: a subprocess against temporary files."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import duckdb
import pytest
import yaml
from dagster._core.instance.ref import InstanceRef

from rag_eval_pipeline.lib.metrics import MEASURES_VERSION

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


EVALUATE_IN_PROCESS = """
import os, sys
from rag_eval_pipeline.cli import main
assert "polars" not in sys.modules and "duckdb" not in sys.modules, "the command line loaded them"
status = main(["evaluate-run", sys.argv[1], sys.argv[2], "-m", "RR"])
print(status, os.environ.get("_RJEM_MALLOC_CONF"))
"""


@pytest.mark.parametrize("chosen", [None, "narenas:1"])
def test_evaluate_run_chooses_the_allocator_setting_before_polars_loads(tmp_path, chosen):
    # Importing the command line loads neither Polars nor DuckDB, so evaluate-run can ask Polars'
    # allocator to return freed pages at once (the run frame is dropped before the measures);
    # a setting the user made is kept.
    qrels = write(tmp_path / "qrels", "q1 0 a 2\n")
    run = write(tmp_path / "run", "q1 Q0 a 1 3.0 t\n")
    env = {key: value for key, value in os.environ.items() if key != "_RJEM_MALLOC_CONF"}
    if chosen:
        env["_RJEM_MALLOC_CONF"] = chosen
    completed = subprocess.run(
        [sys.executable, "-c", EVALUATE_IN_PROCESS, str(qrels), str(run)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr
    status, setting = completed.stdout.splitlines()[-1].split(" ", 1)
    assert status == "0"
    # Polars puts its own defaults first and the given setting after them, which wins.
    assert setting.endswith("," + (chosen or "dirty_decay_ms:0,muzzy_decay_ms:0"))
    assert ("dirty_decay_ms:0" in setting) is (chosen is None)


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
    assert "Success@5         1.0000 vs 1.0000  delta +0.0000" in second.stdout
    history = rag_eval("history", "--metric", "Success@5", env=env)
    assert history.returncode == 0
    rows = [
        line
        for line in history.stdout.splitlines()
        if line[:1] in ("*", " ") and "2026-10-1" in line
    ]
    assert len(rows) == 2 and rows[0].startswith("*  2026-10-15")
    # A comparison's name for a rate is not a table's: the refusal lists the names there are.
    unknown = rag_eval("history", "--metric", "false_refusal", env=env)
    assert unknown.returncode == 2
    assert "no runs with false_refusal in " in unknown.stderr
    assert "; --metric names one of: " in unknown.stderr
    assert "Success@5" in unknown.stderr and "false_refusal_rate" in unknown.stderr
    run_a, run_b = (
        re.search(r"\d{4}-\d\d-\d\d-[0-9a-f]{12}", row).group(0) for row in reversed(rows)
    )
    compare = rag_eval("compare", run_a, run_b, env=env)
    assert compare.returncode == 0 and "same corpus digest" in compare.stdout
    # Each side names what it measured; the same configuration on both sides is said.
    with duckdb.connect(env["RAG_EVAL_WAREHOUSE"], read_only=True) as db:
        [(system_id, config_digest)] = db.sql(
            "SELECT DISTINCT system_id, system_config_digest FROM eval_runs"
        ).fetchall()
    said = compare.stdout.splitlines()
    assert said[1:4] == [
        f"  candidate  {run_a}  system {system_id} {config_digest[:12]}",
        f"  baseline   {run_b}  system {system_id} {config_digest[:12]}",
        "  (the same system configuration on both sides)",
    ]
    exported = tmp_path / "run.trec"
    assert rag_eval("export-run", run_b, str(exported), env=env).returncode == 0
    first_line = exported.read_text().splitlines()[0].split()
    assert first_line[1] == "Q0" and first_line[3] == "1" and "@v" in first_line[2]
    accepted = rag_eval(
        "accept-baseline", run_a, "--reason", "threshold review", "--requested-by", "qa", env=env
    )
    assert accepted.returncode == 0 and f"previous: {run_b}" in accepted.stdout
    history = rag_eval("history", env=env).stdout.splitlines()
    # Only the current baseline is starred; the one it replaced is a former baseline.
    assert [line[:13] for line in history if "2026-10-1" in line] == [
        "+  2026-10-15",
        "*  2026-10-16",
    ]
    refused = rag_eval("rebaseline", "--partition", "2026-10-17", "--reason", " ", env=env)
    assert refused.returncode == 2 and "needs a reason" in refused.stderr


def cli_environment(library: Path, tmp_path: Path) -> dict:
    """A fresh Dagster home and warehouse for the fixture suite, gated on regression only."""
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")
    gates = write(
        tmp_path / "gates.yaml", "version: 1\ngates:\n  - name: no_significant_regression\n"
    )
    return {
        "DAGSTER_HOME": str(home),
        "RAG_EVAL_WAREHOUSE": str(tmp_path / "w.duckdb"),
        "RAG_EVAL_GATES": str(gates),
        "RAG_EVAL_SUITES": str(fixture_suites(library)),
    }


def fixture_night(env: dict, partition: str) -> None:
    """``rag-eval nightly`` of the fixture suite, with the threshold that suits its corpus."""
    config = Path(env["DAGSTER_HOME"]).parent / "run.yaml"
    config.write_text(
        yaml.safe_dump({"resources": {"system": {"config": {"evidence_threshold": 1.0}}}})
    )
    done = rag_eval(
        "nightly", "--suite", "golden", "--partition", partition, "--config", str(config),
        "--no-summary", env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_history_marks_golden_set_and_corpus_changes_and_accept_baseline_warns(library, tmp_path):
    """Three nights: 2026-10-15; 2026-10-16 on a reworded golden set; 2026-11-02 on a new
    corpus snapshot. Each change breaks the history as compare refuses across it, only the
    current baseline is starred, and a baseline the newest night does not compare with is
    accepted with a warning naming both corpus digests."""
    from rag_eval_pipeline.lib.inputs.corpus import freeze_snapshot

    env = cli_environment(library, tmp_path)
    fixture_night(env, "2026-10-15")
    golden = library / "golden.jsonl"
    golden.write_text(golden.read_text().replace("how soon do", "how quickly do"))
    fixture_night(env, "2026-10-16")
    snapshot = library / "2026-11-01"
    shutil.copytree(library / "2026-10-01", snapshot)
    log = snapshot / "documents" / "CLEAN-LOG-001@v1.md"
    log.write_text(log.read_text().replace("12 months", "24 months"))
    freeze_snapshot(snapshot)
    from .test_operations import Webhook

    with Webhook() as hook:  # the night not compared is an alert from the command line too
        fixture_night({**env, "RAG_EVAL_ALERT_WEBHOOK": hook.url}, "2026-11-02")
    [alert] = hook.received
    assert alert["kind"] == "not_comparable" and "was not compared: " in alert["text"]
    with duckdb.connect(env["RAG_EVAL_WAREHOUSE"], read_only=True) as db:
        runs = db.sql(
            "SELECT partition_date, eval_run_id, corpus_digest, golden_digest FROM eval_runs "
            "ORDER BY partition_date"
        ).fetchall()
    (_, first, corpus, golden_1), (_, second, _, golden_2), (_, third, corpus_3, _) = runs

    compare = rag_eval("compare", second, first, env=env)
    assert compare.returncode == 1 and "golden-set digest" in compare.stdout
    history = rag_eval("history", "--suite", "golden", env=env)
    assert history.returncode == 0, history.stderr
    lines = history.stdout.splitlines()
    assert "* current baseline, + former baseline, R re-baseline run" in lines[0]
    assert "| corpus, golden set or measure definitions changed: not comparable" in lines[0]
    assert len(lines) == 7 and lines[1] == "suite golden:"
    assert lines[2].startswith("*  2026-10-15  1.0000 ") and first in lines[2]
    assert lines[3] == f"  | golden set changed: {golden_1[:12]} -> {golden_2[:12]}"
    assert lines[4].startswith("   2026-10-16  1.0000 ") and second in lines[4]
    assert lines[5] == f"  | corpus changed: {corpus[:12]} -> {corpus_3[:12]} (snapshot 2026-11-01)"
    assert lines[6].startswith("   2026-11-02  1.0000 ") and third in lines[6]
    # Each night names its system, as two systems on one night are told apart.
    with duckdb.connect(env["RAG_EVAL_WAREHOUSE"], read_only=True) as db:
        [(system_id, config_digest)] = db.sql(
            "SELECT DISTINCT system_id, system_config_digest FROM eval_runs"
        ).fetchall()
    for line in (lines[2], lines[4], lines[6]):
        assert line.endswith(f"  system {system_id} {config_digest[:12]}"), line

    # A run on another corpus than the newest night's: accepted, with a warning.
    accepted = rag_eval("accept-baseline", second, "--reason", "reworded", env=env)
    assert accepted.returncode == 0, accepted.stderr
    assert f"{second} is now the baseline of suite golden (previous: {first})" in accepted.stdout
    [warning] = accepted.stderr.splitlines()
    assert warning.startswith("warning: every later night measured like the newest of suite ")
    assert f"(2026-11-02, run {third}) will be skipped by the comparison guard" in warning
    assert f"corpus digest {corpus_3[:12]} (run {third}) differs from {corpus[:12]}" in warning
    marks = [line[:13] for line in rag_eval("history", env=env).stdout.splitlines()[2:]]
    assert [mark for mark in marks if "2026-" in mark] == [
        "+  2026-10-15",
        "*  2026-10-16",
        "   2026-11-02",
    ]
    # The current baseline accepted again: said so, nothing recorded.
    again = rag_eval("accept-baseline", second, "--reason", "again", env=env)
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == (
        f"{second} is already the baseline of suite golden: nothing recorded"
    )
    assert again.stderr == ""
    newest = rag_eval("accept-baseline", third, "--reason", "new corpus", env=env)
    assert newest.returncode == 0 and newest.stderr == ""
    with duckdb.connect(env["RAG_EVAL_WAREHOUSE"], read_only=True) as db:
        decisions = db.sql(
            "SELECT eval_run_id, previous_baseline_run_id FROM baseline_decisions "
            "ORDER BY decided_at"
        ).fetchall()
    assert decisions == [(first, None), (second, first), (third, second)]


def test_history_says_where_a_metric_was_not_measured(library, tmp_path):
    """faithfulness is a metric of the warehouse; runs of a suite without a figure of it are
    left out and counted, and a suite where no run has one is said to be so."""
    from rag_eval_pipeline.lib.store.warehouse import Warehouse

    env = cli_environment(library, tmp_path)
    for partition in ("2026-10-15", "2026-10-16", "2026-10-17"):
        fixture_night(env, partition)
    warehouse = Warehouse(Path(env["RAG_EVAL_WAREHOUSE"]))

    def without_faithfulness(partition: str) -> None:
        with warehouse.writing() as connection:
            connection.execute(
                "DELETE FROM generation_metrics WHERE metric = 'faithfulness' AND eval_run_id IN "
                "(SELECT eval_run_id FROM eval_run_records WHERE partition_date = $night)",
                {"night": partition},
            )

    without_faithfulness("2026-10-15")
    history = rag_eval("history", "--suite", "golden", "--metric", "faithfulness", env=env)
    assert history.returncode == 0, history.stderr
    rows = [line[3:13] for line in history.stdout.splitlines() if line[3:8] == "2026-"]
    assert rows == ["2026-10-16", "2026-10-17"]
    assert history.stdout.splitlines()[-1] == (
        "  (1 completed run(s) left out: faithfulness was not measured in them)"
    )
    # The other nights move to a suite of their own (one no longer in the suite registry).
    without_faithfulness("2026-10-16")
    with warehouse.writing() as connection:
        connection.execute(
            "UPDATE eval_run_records SET suite = 'elsewhere' WHERE partition_date = '2026-10-17'"
        )
    refused = rag_eval("history", "--suite", "golden", "--metric", "faithfulness", env=env)
    assert refused.returncode == 2
    assert refused.stderr.strip() == (
        "error: faithfulness was not measured in any run of suite golden: none of its 2 "
        f"completed run(s) in {env['RAG_EVAL_WAREHOUSE']} has a figure of it"
    )
    elsewhere = rag_eval("history", "--suite", "elsewhere", "--metric", "faithfulness", env=env)
    assert elsewhere.returncode == 0 and "  2026-10-17  1.0000" in elsewhere.stdout
    every = rag_eval("history", "--metric", "faithfulness", env=env).stdout
    assert "suite golden:\n  (2 completed run(s) left out: faithfulness was not measured" in every


def test_every_option_of_the_run_commands_says_what_it_does():
    import argparse

    from rag_eval_pipeline.cli import build_parser

    [commands] = [
        action
        for action in build_parser()._actions
        if isinstance(action, argparse._SubParsersAction)
    ]
    for name in ("summary", "history", "compare", "accept-baseline", "suites"):
        command = commands.choices[name]
        for action in command._actions:
            assert action.help, f"rag-eval {name}: {action.dest} has no help"


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


def test_the_first_night_is_a_setting_for_a_team_with_older_snapshots():
    """Nights began on 2026-10-01 for every team; one with older snapshots could not backfill
    them. RAG_EVAL_FIRST_NIGHT moves the first night, and a night before it says so."""
    from rag_eval_pipeline.defs import build_definitions
    from rag_eval_pipeline.defs.partitions import NIGHT, check_night
    from rag_eval_pipeline.lib.deployment import Deployment
    from rag_eval_pipeline.lib.errors import ConfigError

    with pytest.raises(ConfigError) as refused:
        check_night("2026-09-02", "UTC")
    assert str(refused.value).endswith(
        "(today in UTC); for earlier nights set RAG_EVAL_FIRST_NIGHT (now 2026-10-01)"
    )
    assert check_night("2026-09-02", "UTC", first_night="2026-09-01") == "2026-09-02"
    deployment = Deployment.from_environment({"RAG_EVAL_FIRST_NIGHT": "2026-09-01"})
    assert deployment.first_night == "2026-09-01"
    job = build_definitions(deployment).resolve_job_def("nightly_eval")
    nights = job.partitions_def.get_partitions_def_for_dimension(NIGHT).get_partition_keys()
    assert nights[0] == "2026-09-01"
    for bad in ("2026-9-1", "September"):
        with pytest.raises(ConfigError, match=f"RAG_EVAL_FIRST_NIGHT='{bad}' is not a date"):
            Deployment.from_environment({"RAG_EVAL_FIRST_NIGHT": bad})


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["nightly", "--partition", "2026-13-45"], "'2026-13-45' is not a date (YYYY-MM-DD)"),
        (["nightly", "--partition", "2026-09-30"], "2026-09-30: no such night; nights run from"),
        (["nightly", "--partition", "2999-01-01"], "2999-01-01: no such night; nights run from"),
        (["nightly", "--config", "no/such/run.yaml"], "no/such/run.yaml: run configuration file"),
        (["nightly", "--config", "."], "error: .: is a folder, not a run configuration file"),
        (["nightly", "--suite", "no-such-suite"], "no suite named 'no-such-suite'"),
        (["nightly", "--suite", "Bad Name"], "--suite 'Bad Name': use lowercase letters"),
        (["summary", "2026-10-15-000000000000"], "no evaluation run '2026-10-15-000000000000'"),
        (["summary", "--suite", "nosuch"], "no suite named 'nosuch' (suites: "),
        (["summary", "--suite", "procedures"], "no completed evaluation run of suite procedures"),
        (["history", "--suite", "nosuch"], "no suite named 'nosuch' (suites: "),
        (["history", "--suite", "procedures"], "no evaluation run of suite procedures"),
        (["compare", "a-run", "b-run"], "no evaluation run 'a-run'"),
        (["export-run", "no-run", "out.trec"], "no retrieval results for run 'no-run'"),
        (["accept-baseline", "no-run", "--reason", "x"], "no evaluation run 'no-run'"),
        (["evaluate-run", "missing-qrels", "missing-run"], "missing-qrels"),
        (["evaluate-run", "q", "r", "-m", "MRR@5"], "unknown measure 'MRR@5'"),
        (["evaluate-run", "no-qrels", "."], "error: .: is a folder, not a file"),
        (["export-run", "no-run", "."], "error: .: is a folder, not a file"),
        (["export-run", "no-run", "no/such/out.trec"], "cannot write it, no/such does not exist"),
        (["freeze", "no/such/folder"], "error: no/such/folder: no such snapshot folder"),
        (["freeze", "README.md"], "error: README.md: is a file, not a snapshot folder"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
    ],
)
def test_every_bad_argument_is_one_error_line(tmp_path, arguments, message):
    warehouse = tmp_path / "w.duckdb"
    if arguments[0] in ("summary", "history", "compare", "export-run", "accept-baseline"):
        env = {"RAG_EVAL_WAREHOUSE": str(warehouse)}
        from rag_eval_pipeline.lib.store.warehouse import Warehouse

        with Warehouse(warehouse).writing():
            pass
    else:
        env = {"RAG_EVAL_WAREHOUSE": str(warehouse), "DAGSTER_HOME": str(tmp_path / "home")}
    completed = rag_eval(*arguments, env=env)
    assert completed.returncode == 2, completed.stdout + completed.stderr
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1, completed.stderr
    assert lines[0].startswith("error: ") and message in lines[0]
    assert "Traceback" not in completed.stderr


def test_a_bare_nightly_is_recorded_in_the_project_instance(library, tmp_path):
    """Without DAGSTER_HOME the CLI uses the project's .dagster_home, the instance `make ui`
    shows, so the eval_runs row's dagster_run_id names a run an auditor can open."""
    project = tmp_path / "project"
    project.mkdir()
    env = {key: value for key, value in os.environ.items() if key != "DAGSTER_HOME"} | {
        "RAG_EVAL_PROJECT_DIR": str(project),
        "RAG_EVAL_SUITES": str(fixture_suites(library)),
        "RAG_EVAL_WAREHOUSE": str(project / "warehouse" / "rag_eval.duckdb"),
        "RAG_EVAL_GATES": str(ROOT / "rag_eval_pipeline_tests" / "fixtures" / "gates.yaml"),
    }
    completed = subprocess.run(
        [RAG_EVAL, "nightly", "--suite", "golden", "--partition", "2026-10-15"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr
    # A line per finished step with its time, and where the results are.
    assert re.search(
        r"^  retrieval_run: finish_retrieval\s+\d+\.\d\d s$", completed.stderr, re.MULTILINE
    )
    assert "warehouse  " + str(project / "warehouse" / "rag_eval.duckdb") in completed.stdout
    assert "report     " + str(project / "warehouse" / "reports") in completed.stdout
    with duckdb.connect(str(project / "warehouse" / "rag_eval.duckdb"), read_only=True) as db:
        [(eval_run_id, dagster_run_id)] = db.sql(
            "SELECT eval_run_id, dagster_run_id FROM eval_runs"
        ).fetchall()
    home = project / ".dagster_home"
    assert (home / "dagster.yaml").is_file()
    with dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home))) as instance:
        run = instance.get_run_by_id(dagster_run_id)
        assert run is not None and run.job_name == "nightly_eval"
        assert run.status == dg.DagsterRunStatus.SUCCESS
        assert run.tags["rag_eval/eval_run_id"] == eval_run_id
        assert run.tags["dagster/partition"] == "2026-10-15|golden"
        # Its guard decided it here (the first run: the baseline), so the daemon's will not.
        assert run.tags["rag_eval/guard"] == "in_process"
        assert run.tags["rag_eval/guard_decided"] == "true"


def nightly_env(library: Path, tmp_path: Path) -> dict:
    return {
        "RAG_EVAL_SUITES": str(fixture_suites(library)),
        "RAG_EVAL_WAREHOUSE": str(tmp_path / "warehouse.duckdb"),
        "DAGSTER_HOME": str(tmp_path / "home"),
        "RAG_EVAL_GATES": str(ROOT / "rag_eval_pipeline_tests" / "fixtures" / "gates.yaml"),
    }


@pytest.mark.parametrize("broken", ["golden set", "corpus"])
def test_a_night_that_fails_on_bad_input_exits_2(library, tmp_path, broken):
    """A step that fails on the user's input (a gold id the snapshot does not have, a frozen
    document edited since) exits 2, as a bad argument does, not 1 as a failed gate or system
    does; the one error line names the step, the file and the problem."""
    if broken == "golden set":
        golden = library / "golden.jsonl"
        lines = golden.read_text(encoding="utf-8").splitlines()
        lines[1] = lines[1].replace("STORE-FRIDGE-001@v1#s1", "STORE-FRIGDE-001@v1#s1")
        golden.write_text("\n".join(lines) + "\n", encoding="utf-8")
        expected = "error: step golden_set failed: "
        where = "golden.jsonl:2: item 'q2' names gold passage 'STORE-FRIGDE-001@v1#s1'"
    else:
        document = next((library / "2026-10-01" / "documents").glob("STORE-FRIDGE-001@v1.md"))
        text = document.read_text(encoding="utf-8")
        document.unlink()  # a hard link to the stored bytes: edited as a new file
        document.write_text(text.replace("STR-04", "STR-05"), encoding="utf-8")
        expected = "error: step corpus_snapshot failed: "
        where = "changed: STORE-FRIDGE-001@v1"
    completed = rag_eval(
        "nightly", "--suite", "golden", "--partition", "2026-10-15",
        env=nightly_env(library, tmp_path),
    )  # fmt: skip
    assert completed.returncode == 2, completed.stderr
    [line] = [line for line in completed.stderr.splitlines() if line.startswith("error: ")]
    assert line.startswith(expected) and where in line, line


def test_a_night_that_fails_on_its_system_exits_1(library, tmp_path):
    """A step that fails on the system under test (nothing listens at its URL) is not bad
    input: exit 1."""
    import socket

    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    env = nightly_env(library, tmp_path) | {
        "RAG_EVAL_SYSTEM": "http",
        "RAG_EVAL_SYSTEM_URL": f"http://127.0.0.1:{port}",
    }
    completed = rag_eval("nightly", "--suite", "golden", "--partition", "2026-10-15", env=env)
    assert completed.returncode == 1, completed.stderr
    assert "error: step retrieval_run failed: " in completed.stderr


def test_an_incomplete_run_says_so_and_exits_non_zero(library, tmp_path):
    from rag_eval_pipeline.lib.runs import registry
    from rag_eval_pipeline.lib.store.warehouse import Warehouse

    warehouse = tmp_path / "w.duckdb"
    from rag_eval_pipeline.testing import materialize_suite

    from .conftest import NIGHT, SUITE, fixture_assets, fixture_resources

    result = materialize_suite(
        NIGHT, SUITE, fixture_resources(library, warehouse), assets=fixture_assets()
    )
    run_id = result.output_for_node("retrieval_run", "retrieval_run")["eval_run_id"]
    env = {"RAG_EVAL_WAREHOUSE": str(warehouse)}
    shown = rag_eval("summary", run_id, env=env).stdout
    assert f"\n  measures          {MEASURES_VERSION}\n" in shown
    assert (
        json.loads(rag_eval("summary", run_id, "--json", env=env).stdout)["measures_version"]
        == MEASURES_VERSION
    )
    with Warehouse(warehouse).writing() as connection:
        # A row written before measure definitions were versioned says so.
        connection.execute("UPDATE eval_run_records SET measures_version = NULL")
        connection.execute(
            "UPDATE eval_run_records SET status = 'started' WHERE eval_run_id = $run",
            {"run": run_id},
        )
        registry.fail_run(connection, run_id, "killed during eval_summary")
    completed = rag_eval("summary", run_id, env={"RAG_EVAL_WAREHOUSE": str(warehouse)})
    assert completed.returncode == 1
    assert "INCOMPLETE: this run is failed: killed during eval_summary" in completed.stdout
    assert "\n  measures          unrecorded\n" in completed.stdout
    latest = rag_eval("summary", env={"RAG_EVAL_WAREHOUSE": str(warehouse)})
    assert latest.returncode == 2 and "no completed evaluation run" in latest.stderr


def test_a_reader_that_goes_away_ends_the_command_quietly():
    """``rag-eval suites | head -0``: the pipe's reader is gone before the command writes; it
    stops with status 141, as Unix tools do, and no traceback."""
    process = subprocess.Popen(
        [RAG_EVAL, "suites"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT
    )
    process.stdout.close()
    _, err = process.communicate(timeout=120)
    assert process.returncode == 141
    assert b"Traceback" not in err and b"BrokenPipeError" not in err


@pytest.mark.parametrize(
    ("message", "shown"),
    [
        ("rag_eval_pipeline.lib.systems.http.RunStopped: http://h: stopped", "http://h: stopped"),
        ("ValueError: month must be in 1..12", "month must be in 1..12"),
        (
            "/s/documents/A@v1.md:5: status 'x' is not one",
            "/s/documents/A@v1.md:5: status 'x' is not one",
        ),
        ("item q3: malformed reply", "item q3: malformed reply"),
    ],
)
def test_a_failed_step_is_told_without_the_exceptions_class(message, shown):
    from types import SimpleNamespace

    from rag_eval_pipeline.cli.nightly import failure_messages

    error = SimpleNamespace(cls_name="DagsterExecutionStepExecutionError", cause=None)
    error.cause = SimpleNamespace(message=message, cls_name="X", cause=None)
    event = SimpleNamespace(
        is_step_failure=True,
        step_key="retrieval_run.retrieve_shard[shard_0000]",
        event_specific_data=SimpleNamespace(error=error),
    )
    [line] = failure_messages(SimpleNamespace(all_events=[event]))
    assert line.endswith(f"failed: {shown}")


def test_a_system_block_in_a_run_file_keeps_the_environments_url_and_key_variable():
    from rag_eval_pipeline.cli.nightly import with_deployment_system
    from rag_eval_pipeline.lib.deployment import Deployment

    deployment = Deployment.from_environment(
        {
            "RAG_EVAL_SYSTEM": "http",
            "RAG_EVAL_SYSTEM_URL": "http://127.0.0.1:8765",
            "RAG_EVAL_SYSTEM_KEY_ENV": "TEAM_KEY",
        }
    )
    file = {"resources": {"system": {"config": {"concurrency": 2}}, "settings": {"config": {}}}}
    filled = with_deployment_system(file, deployment)
    assert filled["resources"]["system"]["config"] == {
        "concurrency": 2,
        "base_url": "http://127.0.0.1:8765",
        "api_key_env": "TEAM_KEY",
    }
    assert filled["resources"]["settings"] == {"config": {}}
    # What the file names wins; the reference system's block is left as it is.
    named = {"resources": {"system": {"config": {"base_url": "http://10.0.0.2:80"}}}}
    assert (
        with_deployment_system(named, deployment)["resources"]["system"]["config"]["base_url"]
        == "http://10.0.0.2:80"
    )
    reference = {"resources": {"system": {"config": {"evidence_threshold": 4.0}}}}
    assert with_deployment_system(reference, Deployment()) == reference


def test_rag_eval_sql_reads_the_warehouse_and_never_writes_it(tmp_path):
    """``rag-eval sql`` is the DuckDB session for those without the DuckDB command line: a
    table or CSV of any query on the published warehouse, read-only; bad SQL and writes are one
    error line naming the warehouse, status 2."""
    from rag_eval_pipeline.lib.store.warehouse import Warehouse

    warehouse = tmp_path / "w.duckdb"
    with Warehouse(warehouse).writing() as connection:
        connection.execute(
            "INSERT INTO baseline_decisions (suite, golden_set, eval_run_id, kind, reason, "
            "decided_at) VALUES ('mine', 'golden', 'r1', 'accepted', 'a, reason', now())"
        )
    env = {"RAG_EVAL_WAREHOUSE": str(warehouse)}
    query = "SELECT suite, eval_run_id, reason FROM baseline_decisions"
    table = rag_eval("sql", query, env=env)
    assert table.returncode == 0, table.stderr
    assert (
        "┆ eval_run_id ┆" in table.stdout and "│ mine  ┆ r1          ┆ a, reason │" in table.stdout
    )
    csv = rag_eval("sql", query, "--csv", env=env)
    assert csv.stdout == 'suite,eval_run_id,reason\nmine,r1,"a, reason"\n'
    for statement, problem in [
        ("DELETE FROM baseline_decisions", "read-only mode"),
        ("SELEC 1", "syntax error"),
        ("SELECT decided_at - decided_at AS took FROM baseline_decisions", "cast it"),
    ]:
        refused = rag_eval("sql", statement, env=env)
        assert refused.returncode == 2
        assert refused.stderr.startswith(f"error: {warehouse}: ") and problem in refused.stderr
    assert rag_eval(
        "sql", "SELECT count(*) AS n FROM baseline_decisions", "--csv", env=env
    ).stdout == ("n\n1\n")
    # A list or struct column (generation_results' cited_ids) is JSON text in CSV.
    nested = rag_eval(
        "sql",
        "SELECT ['a@v1#s1', 'b, c@v2#s1'] AS cited_ids, [] AS none, NULL::VARCHAR[] AS missing, "
        "{'k': [1, 2], 'on': DATE '2026-10-15'} AS parts",
        "--csv",
        env=env,
    )
    assert nested.returncode == 0, nested.stderr
    assert nested.stdout == (
        "cited_ids,none,missing,parts\n"
        '"[""a@v1#s1"", ""b, c@v2#s1""]",[],,"{""k"": [1, 2], ""on"": ""2026-10-15""}"\n'
    )
    # JSON has no NaN or infinity: a number that is one is null inside the JSON text.
    odd = rag_eval(
        "sql",
        "SELECT [1.5, 'nan'::DOUBLE, 'inf'::DOUBLE, NULL] AS scores, "
        "{'x': '-inf'::DOUBLE} AS part, 'nan'::DOUBLE AS plain",
        "--csv",
        env=env,
    )
    assert odd.returncode == 0, odd.stderr
    assert odd.stdout == 'scores,part,plain\n"[1.5, null, null, null]","{""x"": null}",NaN\n'


def test_the_latest_summary_mentions_a_later_night_that_did_not_finish(library, tmp_path):
    """``rag-eval summary`` without a run id shows the latest night's completed run; a run begun after
    it that failed (tonight's, killed) is named on stderr, so it is not read past."""
    from rag_eval_pipeline.lib.runs import registry
    from rag_eval_pipeline.lib.store.warehouse import Warehouse
    from rag_eval_pipeline.testing import materialize_suite

    from .conftest import SUITE, fixture_assets, fixture_resources

    warehouse = tmp_path / "w.duckdb"
    runs = []
    for night in ("2026-10-15", "2026-10-16"):
        result = materialize_suite(
            night, SUITE, fixture_resources(library, warehouse), assets=fixture_assets()
        )
        runs.append(result.output_for_node("retrieval_run", "retrieval_run")["eval_run_id"])
    env = {"RAG_EVAL_WAREHOUSE": str(warehouse)}
    clean = rag_eval("summary", env=env)
    assert clean.returncode == 0 and runs[1] in clean.stdout and "warning" not in clean.stderr
    with Warehouse(warehouse).writing() as connection:
        connection.execute(
            "UPDATE eval_run_records SET status = 'started' WHERE eval_run_id = $run",
            {"run": runs[1]},
        )
        registry.fail_run(connection, runs[1], "killed during generation_run")
    shown = rag_eval("summary", env=env)
    assert shown.returncode == 0 and f"Evaluation run {runs[0]}" in shown.stdout
    warned = (
        f"warning: {runs[1]} (night 2026-10-16), begun after this run, is failed: killed during "
        "generation_run\n"
    )
    assert shown.stderr == warned
    assert "warning" not in rag_eval("summary", runs[0], env=env).stderr
    # A backfilled older night completing after it neither takes the latest night's place nor
    # hides the failed one.
    backfill = materialize_suite(
        "2026-10-14", SUITE, fixture_resources(library, warehouse), assets=fixture_assets()
    )
    older = backfill.output_for_node("retrieval_run", "retrieval_run")["eval_run_id"]
    shown = rag_eval("summary", env=env)
    assert f"Evaluation run {runs[0]}" in shown.stdout and older not in shown.stdout
    assert shown.stderr == warned
    later = rag_eval("summary", older, env=env)
    assert later.returncode == 0 and "warning" not in later.stderr
    # The failed night completed again: nothing is left unfinished, and it is shown.
    materialize_suite(
        "2026-10-16", SUITE, fixture_resources(library, warehouse), assets=fixture_assets()
    )
    shown = rag_eval("summary", env=env)
    assert f"Evaluation run {runs[1]}" in shown.stdout and "warning" not in shown.stderr


def test_the_summary_names_failed_attempts_the_warehouse_cannot_show(
    library, tmp_path, monkeypatch
):
    """Two failures that leave the warehouse as it was, each named by ``rag-eval summary``
    from the Dagster instance: a later attempt of a completed evaluation run (same identity)
    that failed after it began (its run stays complete: the figures are the earlier
    attempt's), and a night whose system could not be asked for its version, which never got
    an evaluation run. A run that completes the night again clears the warning."""
    import dagster as dg
    from dagster._core.instance.ref import InstanceRef

    from rag_eval_pipeline.defs import generation_run
    from rag_eval_pipeline.defs.resources import ReferenceSystemResource
    from rag_eval_pipeline.testing import materialize_suite

    from .conftest import SUITE, fixture_assets, fixture_resources

    home, warehouse = tmp_path / "home", tmp_path / "w.duckdb"
    home.mkdir()
    (home / "dagster.yaml").write_text("")
    env = {"RAG_EVAL_WAREHOUSE": str(warehouse), "DAGSTER_HOME": str(home)}
    with dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home))) as instance:

        def night(expect_success: bool = True):
            result = materialize_suite(
                "2026-10-15",
                SUITE,
                fixture_resources(library, warehouse),
                assets=fixture_assets(),
                instance=instance,
            )
            assert result.success is expect_success
            return result

        first = night().output_for_node("retrieval_run", "retrieval_run")["eval_run_id"]
        assert rag_eval("summary", env=env).stderr == ""

        def gone(*_):
            raise RuntimeError("the answers went missing")

        with monkeypatch.context() as patched:
            patched.setattr(generation_run, "invalid_citations_message", gone)
            attempt = night(expect_success=False).run_id
        asked = rag_eval("summary", first, env=env)
        assert asked.returncode == 0  # still complete: the earlier attempt's figures
        assert (
            asked.stderr.startswith(
                f"warning: a later attempt of this evaluation run (Dagster run {attempt}, after this "
                "run completed) did not finish: step generation_run failed: "
            )
            and "the answers went missing" in asked.stderr
        )

        def down(self):
            raise RuntimeError("http://127.0.0.1:9/health: connection failed")

        with monkeypatch.context() as patched:
            patched.setattr(ReferenceSystemResource, "config", down)
            never = night(expect_success=False).run_id
        latest = rag_eval("summary", env=env)
        assert latest.returncode == 0 and f"Evaluation run {first}" in latest.stdout
        lines = latest.stderr.splitlines()
        assert len(lines) == 2, latest.stderr
        assert (
            lines[0].startswith(
                f"warning: night 2026-10-15 of suite {SUITE} (Dagster run {never}, after this run "
                "completed) did not finish: step retrieval_run"
            )
            and "connection failed" in lines[0]
        )
        assert f"(Dagster run {attempt}," in lines[1]
        # Past the limit, the older ones are counted, not read.
        from rag_eval_pipeline.cli import runs as runs_command
        from rag_eval_pipeline.lib.runs import registry
        from rag_eval_pipeline.lib.store.warehouse import Warehouse

        with monkeypatch.context() as patched, Warehouse(warehouse).reading() as connection:
            patched.setenv("DAGSTER_HOME", str(home))
            patched.setattr(runs_command, "MAX_FAILED_ATTEMPTS", 1)
            capped = runs_command.failed_attempts(
                connection, registry.run_row(connection, first), None, None
            )
        assert [line.split(" (")[0] for _, line in capped] == [
            f"night 2026-10-15 of suite {SUITE}",
            "1 earlier failed attempt(s) after this run completed",
        ]
        night()  # completed again: nothing left unfinished
        assert rag_eval("summary", env=env).stderr == ""


def test_the_summary_names_a_killed_night_not_yet_swept(library, tmp_path):
    """``rag-eval nightly`` killed mid-run leaves its Dagster run marked started until the next
    night or the daemon's sweep fails it: meanwhile the summary of the latest completed run
    names it (its process is gone), and says nothing of a night whose process is alive."""
    import socket

    import dagster as dg
    from dagster._core.instance.ref import InstanceRef

    from rag_eval_pipeline.defs.resources import WarehouseResource
    from rag_eval_pipeline.defs.sensors import HOST_TAG, PID_TAG, fail_abandoned_runs
    from rag_eval_pipeline.testing import materialize_suite

    from .conftest import SUITE, fixture_assets, fixture_resources

    @dg.op
    def step() -> None:
        return None

    @dg.job
    def night_job() -> None:
        step()

    home, warehouse = tmp_path / "home", tmp_path / "w.duckdb"
    home.mkdir()
    (home / "dagster.yaml").write_text("")
    env = {"RAG_EVAL_WAREHOUSE": str(warehouse), "DAGSTER_HOME": str(home)}
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(timeout=30)
    with dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home))) as instance:
        assert materialize_suite(
            "2026-10-15",
            SUITE,
            fixture_resources(library, warehouse),
            assets=fixture_assets(),
            instance=instance,
        ).success
        runs = {}
        for night, pid in (("2026-10-16", gone.pid), ("2026-10-17", os.getpid())):
            tags = {
                "dagster/partition/night": night,
                "dagster/partition/suite": SUITE,
                HOST_TAG: socket.gethostname(),
                PID_TAG: str(pid),
            }
            runs[night] = instance.create_run_for_job(
                night_job, tags=tags, status=dg.DagsterRunStatus.STARTED
            ).run_id
    latest = rag_eval("summary", env=env)
    assert latest.returncode == 0, latest.stderr
    assert latest.stderr.splitlines() == [
        f"warning: night 2026-10-16 of suite {SUITE} (Dagster run {runs['2026-10-16']}, after "
        f"this run completed) did not finish: the process that ran it (pid {gone.pid} on "
        f"{socket.gethostname()}) is gone; still marked started until it is swept"
    ]
    # Once the sweep has failed it, the warning keeps the sweep's reason, not a bare "failed".
    with dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home))) as instance:
        swept = fail_abandoned_runs(instance, WarehouseResource(path=str(warehouse)))
    assert swept == [runs["2026-10-16"]]
    assert rag_eval("summary", env=env).stderr.splitlines() == [
        f"warning: night 2026-10-16 of suite {SUITE} (Dagster run {runs['2026-10-16']}, after "
        f"this run completed) did not finish: the process that ran it (pid {gone.pid} on "
        f"{socket.gethostname()}) is gone"
    ]


def test_the_summary_says_when_a_complete_run_has_no_report(library, tmp_path):
    """A night killed between its publish and its report is complete in the warehouse without
    the file: the summary said where the report is, as if it were there."""
    env = cli_environment(library, tmp_path)
    fixture_night(env, "2026-10-15")
    shown = rag_eval("summary", env=env)
    line = next(line for line in shown.stdout.splitlines() if line.startswith("  report     "))
    report = Path(line.removeprefix("  report     "))
    assert report.is_file() and "not written" not in shown.stdout
    report.unlink()
    shown = rag_eval("summary", env=env)
    assert (
        f"  report     {report} (not written: the step that writes it ended first; run the "
        "night again to write it)"
    ) in shown.stdout


def rebaseline_on_a_changed_library(library: Path, env: dict) -> subprocess.CompletedProcess:
    """A 2026-11-01 snapshot with one section edited (it answers golden items), frozen, and
    ``rag-eval rebaseline`` of the night after it."""
    from rag_eval_pipeline.lib.inputs.corpus import freeze_snapshot

    snapshot = library / "2026-11-01"
    shutil.copytree(library / "2026-10-01", snapshot, copy_function=shutil.copyfile)
    log = snapshot / "documents" / "CLEAN-LOG-001@v1.md"
    log.write_text(log.read_text().replace("12 months", "24 months"))
    freeze_snapshot(snapshot)
    return rag_eval(
        "rebaseline", "--suite", "golden", "--partition", "2026-11-02", "--reason", "new library",
        env=env,
    )  # fmt: skip


def test_rag_eval_rebaseline_prints_the_offsets_it_stored(library, tmp_path):
    """``rag-eval rebaseline`` on a new snapshot runs the night, the baseline's system on it and
    the comparison, and prints the offset of each metric it stored (the corpus change alone)."""
    env = cli_environment(library, tmp_path)
    fixture_night(env, "2026-10-15")
    done = rebaseline_on_a_changed_library(library, env)
    with duckdb.connect(env["RAG_EVAL_WAREHOUSE"], read_only=True) as db:
        offsets = db.sql(
            "SELECT rebaseline_run_id, old_baseline_run_id, metric, old_value, new_value, "
            "offset_value FROM rebaseline_offsets ORDER BY metric"
        ).fetchall()
    assert offsets, done.stdout + done.stderr
    rebaseline_run, old_baseline = offsets[0][:2]
    assert (
        f"re-baseline {rebaseline_run} against the old baseline {old_baseline} (the baseline's "
        "system on both: the effect of the corpus change alone):"
    ) in done.stdout
    for _, _, metric, old, new, offset in offsets:
        if None not in (old, new, offset):
            assert f"  {metric:<16} {old:.4f} -> {new:.4f}  offset {offset:+.4f}" in done.stdout
    # The edited section answers golden items: their labels are stale on the new snapshot, and
    # the offsets say part of them is that, not the library.
    with duckdb.connect(env["RAG_EVAL_WAREHOUSE"], read_only=True) as db:
        drifted = [
            item
            for (item,) in db.execute(
                "SELECT d.item_id FROM golden_drift d JOIN eval_runs r ON d.golden_digest = "
                "r.golden_digest AND d.corpus_digest = r.corpus_digest WHERE r.eval_run_id = $1 "
                "AND d.drifted ORDER BY d.item_id",
                [rebaseline_run],
            ).fetchall()
        ]
    assert drifted
    assert (
        f"  note: {len(drifted)} golden item(s) have an answering passage that is not current, "
        f"or changed, on the new snapshot ({', '.join(drifted[:5])}"
    ) in done.stdout


def test_rag_eval_rebaseline_of_a_baseline_it_cannot_rerun_fails_and_names_the_way_out(
    library, tmp_path
):
    """The rebaseline job re-creates only the reference system: for a baseline of another
    system (a team's service) the command used to print one line and exit 0, the baseline
    unmoved and the next night advising the same command. It now fails, and both the guard and
    the not-comparable reason name the way that works: accept the run as the new baseline."""
    env = cli_environment(library, tmp_path)
    fixture_night(env, "2026-10-15")
    with duckdb.connect(env["RAG_EVAL_WAREHOUSE"]) as db:
        db.execute("UPDATE eval_run_records SET system_id = 'http'")
        (baseline,) = db.execute(
            "SELECT eval_run_id FROM eval_runs WHERE is_current_baseline"
        ).fetchone()
    done = rebaseline_on_a_changed_library(library, env)
    assert done.returncode == 1, done.stdout + done.stderr
    with duckdb.connect(env["RAG_EVAL_WAREHOUSE"], read_only=True) as db:
        assert db.execute("SELECT count(*) FROM rebaseline_offsets").fetchone() == (0,)
        assert db.execute(
            "SELECT eval_run_id FROM eval_runs WHERE is_current_baseline"
        ).fetchall() == [(baseline,)]
        (candidate,) = db.execute(
            "SELECT eval_run_id FROM eval_runs WHERE partition_date = '2026-11-02'"
        ).fetchone()
    assert (
        "error: the re-baseline was not run: cannot re-run system 'http': only the reference "
        "system's configuration is re-created by the rebaseline job; to compare from this corpus "
        f"on, accept the run as the new baseline: rag-eval accept-baseline {candidate} --reason"
    ) in done.stderr
    night = rag_eval("nightly", "--suite", "golden", "--partition", "2026-11-03", env=env)
    said = night.stdout + night.stderr
    assert "The baseline is system http, which the rebaseline job cannot re-run" in said, said
    assert "rag-eval accept-baseline" in said and "Re-baseline explicitly" not in said


@pytest.mark.parametrize(
    ("where", "said"),
    [
        ("settings.yaml", "exists and is not a DuckDB database"),
        ("settings.yaml/w/rag_eval.duckdb", "{folder}/settings.yaml is a file, not a folder"),
        (".", "is a folder, not a DuckDB file"),
    ],
)
@pytest.mark.parametrize("command", [["nightly", "--partition", "2026-10-15"], ["history"]])
def test_a_warehouse_setting_that_names_no_duckdb_file_is_refused_before_anything(
    tmp_path, where, said, command
):
    # A night used to run to its end and fail in its alert with a traceback, leaving a store/
    # folder and a .lock file beside the YAML file.
    folder = tmp_path / "project"
    folder.mkdir()
    settings = write(folder / "settings.yaml", "judge: llm\n")
    warehouse = (folder / where).resolve()
    completed = rag_eval(
        *command,
        env={"RAG_EVAL_WAREHOUSE": str(warehouse), "DAGSTER_HOME": str(tmp_path / "home")},
    )
    assert completed.returncode == 2, completed.stdout + completed.stderr
    assert (
        completed.stderr == f"error: RAG_EVAL_WAREHOUSE {warehouse}: {said.format(folder=folder)}\n"
    )
    assert sorted(p.name for p in folder.iterdir()) == ["settings.yaml"]
    assert settings.read_text(encoding="utf-8") == "judge: llm\n"


@pytest.mark.parametrize(
    "arguments", [["suites"], ["nightly", "--partition", "2026-10-15"], ["nightly", "--suite", "x"]]
)
def test_a_suite_folder_that_does_not_exist_is_named_as_such(tmp_path, arguments):
    # It used to read as a folder without suites: "no suite files", "(suites: none)".
    registry = tmp_path / "no-such-suites"
    completed = rag_eval(
        *arguments,
        env={
            "RAG_EVAL_SUITES": str(registry),
            "RAG_EVAL_WAREHOUSE": str(tmp_path / "w" / "w.duckdb"),
            "DAGSTER_HOME": str(tmp_path / "home"),
        },
    )
    assert completed.returncode == 2, completed.stdout + completed.stderr
    assert completed.stderr == (
        f"error: {registry}: the suite folder (RAG_EVAL_SUITES) does not exist\n"
    )
    assert not (tmp_path / "w").exists()


@pytest.mark.parametrize(
    ("config", "said"),
    [
        (
            {"resources": {"system": {"config": {"evidence_treshold": 0.5}}}},
            "run configuration of nightly_eval: resources.system.config: unknown key "
            "'evidence_treshold' (keys: b, current_only, evidence_threshold, k1, "
            "max_answer_sentences)",
        ),
        (
            {"resourcez": {"system": {}}},
            "run configuration of nightly_eval: the top level: unknown key 'resourcez' "
            "(keys: execution, loggers, ops, resources)",
        ),
        (
            {"resources": {"system": {"config": {"evidence_threshold": "high"}}}},
            "run configuration of nightly_eval: resources.system.config.evidence_threshold: "
            "'high' is not of type Float",
        ),
        (
            {"resources": {"settings": {"config": {"seed": "high"}}}},
            "resources.settings.config.seed: Input should be a valid integer, unable to parse "
            "string as an integer, got 'high'",
        ),
        (
            {"resources": {"settings": {"config": {"bogus": 1}}}},
            "run configuration of nightly_eval: resources.settings.config: unknown key 'bogus' "
            "(keys: bootstrap_resamples, context_k, cutoffs, judge_repeats, judge_sample_size, "
            "rel_level, retrieval_depth, seed)",
        ),
    ],
)
def test_a_bad_run_configuration_is_named_in_a_line_without_the_schema(tmp_path, config, said):
    # Dagster's message dumped the job's whole expected config schema; pydantic's ended in a URL;
    # neither named the file.
    source = write(tmp_path / "run.yaml", yaml.safe_dump(config))
    warehouse = tmp_path / "w" / "w.duckdb"
    completed = rag_eval(
        "nightly",
        "--partition",
        "2026-10-15",
        "--config",
        str(source),
        env={"RAG_EVAL_WAREHOUSE": str(warehouse), "DAGSTER_HOME": str(tmp_path / "home")},
    )
    assert completed.returncode == 2, completed.stdout + completed.stderr
    errors = [line for line in completed.stderr.splitlines() if line.startswith("error: ")]
    assert errors == [f"error: {source}: {said}"], completed.stderr
    assert len(completed.stderr.splitlines()) <= 2, completed.stderr
    assert "Expected:" not in completed.stderr and "pydantic" not in completed.stderr
    assert not warehouse.parent.exists()


def test_compare_says_which_run_is_the_candidate(capsys):
    from rag_eval_pipeline.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["compare", "--help"])
    usage = capsys.readouterr().out
    assert "usage: rag-eval compare [-h] candidate baseline" in usage
    assert "candidate minus baseline" in " ".join(usage.split())
    args = build_parser().parse_args(["compare", "new-run", "old-run"])
    assert (args.run_a, args.run_b) == ("new-run", "old-run")


def test_a_settings_file_that_is_not_text_is_one_error_naming_it(tmp_path):
    """A run configuration, gates or suite file that is binary (or cannot be read) is refused
    naming the file, as bad input, not a traceback that exits as a failed gate would."""
    from rag_eval_pipeline.cli.nightly import read_run_config
    from rag_eval_pipeline.lib.errors import InputError
    from rag_eval_pipeline.lib.inputs.suites import load_suite
    from rag_eval_pipeline.lib.runs.gates import load_gates

    binary = b"\xff\xfe\x00gates: []\n"
    for name in ("run.yaml", "gates.yaml", "mine.yaml"):
        (tmp_path / name).write_bytes(binary)
    with pytest.raises(InputError, match=r"run\.yaml: not UTF-8 text \(byte 0\)"):
        read_run_config(str(tmp_path / "run.yaml"))
    with pytest.raises(InputError, match=r"gates\.yaml: gates file cannot be read: .*utf-8"):
        load_gates(tmp_path / "gates.yaml")
    with pytest.raises(InputError, match=r"mine\.yaml: cannot be read: .*utf-8"):
        load_suite(tmp_path, "mine")
