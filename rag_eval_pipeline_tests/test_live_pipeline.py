"""A live assistant over HTTP through the nightly graph, and replaying what it did.

- The bundled suite on 2026-10-15: the reference system in-process, the same system served by
  ``rag-eval serve-reference`` (a real subprocess, stopped by its pid) and evaluated over HTTP,
  and the replay of the captured Parquet give the same retrieval and generation tables and the
  same headline figures; the replay gives the live run's tables exactly, calls included.
- The fixture suite against the fault service: too many system errors fail the run after its
  retrieval rows, calls and capture are written, saying how many and why (through the graph and
  through ``rag-eval nightly``, which marks the run failed with the counts); under the bound the
  failed items are in no rate; a service on another corpus state is refused before any question.
"""

import datetime as dt
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import duckdb
import polars as pl
import pytest

from rag_eval_pipeline.defs.resources import (
    HttpSystemResource,
    ReplaySystemResource,
    WarehouseResource,
)
from rag_eval_pipeline.lib.inputs.corpus import load_snapshot, snapshot_tables
from rag_eval_pipeline.lib.inputs.traces import trace_file_digest
from rag_eval_pipeline.lib.metrics import MEASURES_VERSION
from rag_eval_pipeline.lib.reporting.summary import format_summary, headline_from_tables
from rag_eval_pipeline.lib.store.run_store import RunStore
from rag_eval_pipeline.lib.systems.calls import SYSTEM_ERROR
from rag_eval_pipeline.lib.systems.reference import ReferenceConfig
from rag_eval_pipeline.lib.systems.service import ReferenceAnswers
from rag_eval_pipeline.testing import evaluation_resources, materialize_suite
from rag_eval_pipeline.testing.fault_service import FaultService

from .conftest import (
    FIXTURE_GATES,
    NIGHT,
    SUITE,
    fixture_assets,
    fixture_resources,
    fixture_suites,
)

ROOT = Path(__file__).resolve().parents[1]
RAG_EVAL = str(Path(sys.executable).parent / "rag-eval")
BUNDLED = "procedures"
# Tables a run writes per item, compared row for row, and the metric tables.
COMPARED = {
    "retrieval_results": "item_id, rank",
    "generation_results": "item_id",
    "judge_verdicts": "item_id, claim_index",
    "retrieval_item_metrics": "item_id, measure, k",
    "retrieval_metrics": "scope, scope_value, measure",
    "generation_item_metrics": "item_id",
    "generation_metrics": "scope, scope_value, metric",
    "sufficiency_correctness": "context_sufficient, answer_correct",
    "abstention_sweep": "threshold",
}


def run_table(connection, table: str, eval_run_id: str) -> pl.DataFrame:
    order = COMPARED.get(table, "item_id")
    return connection.sql(
        f"SELECT * EXCLUDE (eval_run_id) FROM {table} WHERE eval_run_id = $run ORDER BY {order}",
        params={"run": eval_run_id},
    ).pl()


def figures(headline: dict) -> dict:
    """The headline's figures, without the identity of the run."""
    return {key: headline[key] for key in ("retrieval", "generation", "no_answer")}


@pytest.fixture(scope="module")
def served_reference() -> Iterator[dict]:
    """``rag-eval serve-reference`` on a free port over the bundled 2026-10-01 snapshot."""
    process = subprocess.Popen(
        [RAG_EVAL, "serve-reference", "--port", "0", "--snapshot", "2026-10-01"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = process.stdout.readline()
        found = re.search(r"http://127\.0\.0\.1:\d+", first)
        assert found, f"no URL in {first!r}; stderr: {process.stderr.read()}"
        yield {"url": found.group(0), "first_line": first}
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        finally:
            if process.poll() is None:
                process.kill()
    assert process.returncode == 0
    assert "stopped after" in process.stderr.read()


@pytest.fixture(scope="module")
def three_runs(served_reference, tmp_path_factory) -> Iterator[dict]:
    """The bundled suite on one night in-process, over HTTP, and replayed from the capture,
    into one warehouse."""
    folder = tmp_path_factory.mktemp("live")
    warehouse = folder / "warehouse.duckdb"

    def night(system=None) -> str:
        result = materialize_suite(
            NIGHT,
            BUNDLED,
            evaluation_resources(suites=ROOT / "suites", warehouse=warehouse, system=system),
        )
        assert result.success
        return result.output_for_node("retrieval_run", "retrieval_run")["eval_run_id"]

    runs = {
        "in_process": night(),
        "http": night(HttpSystemResource(base_url=served_reference["url"])),
    }
    with duckdb.connect(str(warehouse), read_only=True) as connection:
        (capture,) = connection.sql(
            "SELECT trace_file FROM eval_runs WHERE eval_run_id = $run",
            params={"run": runs["http"]},
        ).fetchall()[0]
    runs["replay"] = night(ReplaySystemResource(path=capture))
    connection = duckdb.connect(str(warehouse), read_only=True)
    yield {"connection": connection, "capture": Path(capture), "folder": folder, **runs}
    connection.close()


def test_over_http_the_reference_system_gives_the_in_process_tables(three_runs):
    connection = three_runs["connection"]
    local, live = three_runs["in_process"], three_runs["http"]
    assert local != live
    for table in COMPARED:
        expected, got = run_table(connection, table, local), run_table(connection, table, live)
        if table == "generation_metrics":
            # The live run has the operations figures the in-process system cannot have.
            operations = pl.col("scope") == "operations"
            latency = pl.col("metric").is_in(["requests", "retries"]) | pl.col(
                "metric"
            ).str.starts_with("latency")
            assert got.filter(operations & latency).height == 5
            got = got.filter(~(operations & latency))
        assert got.height and got.equals(expected), table
    headlines = {
        run: headline_from_tables(connection, three_runs[run]) for run in ("in_process", "http")
    }
    assert figures(headlines["http"]) == figures(headlines["in_process"])
    success = {r["measure"]: r for r in headlines["http"]["retrieval"]}["Success@5"]
    assert (success["n"], round(success["value"], 4)) == (190, 0.8263)


def test_the_live_run_records_its_capture_and_identity(three_runs, served_reference):
    connection = three_runs["connection"]
    run = (
        connection.sql(
            "SELECT system_id, system_config, system_config_digest, trace_file, trace_digest, "
            "corpus_digest, status "
            "FROM eval_runs WHERE eval_run_id = $run",
            params={"run": three_runs["http"]},
        )
        .pl()
        .row(0, named=True)
    )
    config = json.loads(run["system_config"])
    assert run["status"] == "complete" and run["system_id"] == "http"
    assert config["base_url"] == served_reference["url"]
    assert re.fullmatch(r"reference-bm25 [0-9a-f]{12}", config["system_version"])
    assert config["system_version"] in served_reference["first_line"]
    capture = three_runs["capture"]
    assert capture == three_runs["folder"] / "traces" / f"{three_runs['http']}.parquet"
    assert run["trace_digest"] == trace_file_digest(capture)
    assert run["corpus_digest"] in served_reference["first_line"]
    calls = run_table(connection, "system_calls", three_runs["http"])
    assert calls.height == 266 and set(calls["outcome"]) == {"ok"}
    assert (calls["attempts"] == 1).all() and calls["latency_ms"].is_not_null().all()
    summary = format_summary(headline_from_tables(connection, three_runs["http"]))
    assert "system errors                0 of 266 (0.0%)" in summary
    # The version the service reported is shown beside its id, as an engineer names it.
    assert f"  system            http  version {config['system_version']}  config " in summary
    # And in the identity table of the report the night wrote.
    [(report_path,)] = connection.sql(
        "SELECT report_path FROM eval_runs WHERE eval_run_id = $run",
        params={"run": three_runs["http"]},
    ).fetchall()
    page = Path(report_path).read_text(encoding="utf-8")
    assert f'<td>System version</td><td class="wrap">{config["system_version"]}</td>' in page
    assert f'<td>Measure definitions</td><td class="wrap">{MEASURES_VERSION}</td>' in page
    assert re.search(r"latency p50 / p95 / max\s+[\d.]+ / [\d.]+ / [\d.]+ ms  \(n=266\)", summary)
    # The history tells two systems of one night apart by the version each reported too.
    history = subprocess.run(
        [str(Path(sys.executable).parent / "rag-eval"), "history"],
        env={**os.environ, "RAG_EVAL_WAREHOUSE": str(three_runs["folder"] / "warehouse.duckdb")},
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    [line] = [line for line in history.splitlines() if three_runs["http"] in line]
    assert line.endswith(
        f"system http {run['system_config_digest'][:12]} (version {config['system_version']})"
    )


def test_replaying_the_capture_gives_the_live_run_again(three_runs):
    connection = three_runs["connection"]
    live, replay = three_runs["http"], three_runs["replay"]
    for table in [*COMPARED, "system_calls"]:
        assert run_table(connection, table, replay).equals(run_table(connection, table, live)), (
            table
        )
    config = json.loads(
        connection.sql(
            "SELECT system_config FROM eval_runs WHERE eval_run_id = $run", params={"run": replay}
        ).fetchall()[0][0]
    )
    assert config["trace_digest"] == trace_file_digest(three_runs["capture"])


@pytest.fixture
def fault_service(library: Path) -> Iterator[FaultService]:
    """The reference system over the fixture library (its tiny-corpus threshold), with faults."""
    loaded = load_snapshot(library / "2026-10-01")
    passages = snapshot_tables(loaded, loaded_at=dt.datetime(2026, 10, 15))["corpus_passages"]
    answers = ReferenceAnswers(
        passages, loaded.corpus_digest, settings=ReferenceConfig(evidence_threshold=1.0)
    )
    with FaultService(answers) as service:
        yield service


def step_failure(result, step: str) -> str:
    """The failure of the asset ``step`` (any of its ops: a sharded asset is a graph)."""
    for event in result.all_events:
        if event.is_step_failure and event.step_key.split(".")[0] == step:
            error = event.event_specific_data.error
            return (error.cause or error).message
    raise AssertionError(f"step {step} did not fail")


def test_too_many_system_errors_fail_the_run_after_writing_what_it_has(
    library, tmp_path, fault_service
):
    fault_service.fail("server_error", item_id="q2")
    warehouse = tmp_path / "warehouse.duckdb"
    system = HttpSystemResource(base_url=fault_service.url, max_retries=0)
    result = materialize_suite(
        NIGHT, SUITE, fixture_resources(library, warehouse, system=system), assets=fixture_assets()
    )
    assert not result.success
    message = (
        "1 of 6 items (16.7%) ended in a system error, above the bound of 2.0%: "
        f"1 http_status; e.g. item q2: HTTP 500 from {fault_service.url}/query, saying "
        '\'{"error": "internal error"}\' (1 attempt)'
    )
    (check,) = [
        c
        for c in result.get_asset_check_evaluations()
        if c.check_name == "system_errors_within_bound"
    ]
    assert not check.passed and check.metadata["message"].value == message
    assert message in step_failure(result, "retrieval_run")
    assert not result.asset_materializations_for_node("generation_run")
    eval_run_id = result.output_for_node("retrieval_run", "retrieval_run")["eval_run_id"]
    store = RunStore(tmp_path / "store")
    run_dir = store.run_dir(eval_run_id)
    calls = store.read_table(run_dir, "system_calls")
    assert calls.filter(pl.col("outcome") == SYSTEM_ERROR)["item_id"].to_list() == ["q2"]
    # The other items' rows are written (q4 and q6 share no term with the library).
    assert set(store.read_table(run_dir, "retrieval_results")["item_id"]) == {"q1", "q3", "q5"}
    # The capture is on the run's record at once, and in the warehouse once the failure is
    # recorded (by the failure sensor under the daemon, or rag-eval nightly).
    record = store.read_json(run_dir / "run.json")
    assert record["trace_digest"] == trace_file_digest(record["trace_file"])
    WarehouseResource(path=str(warehouse), store=str(tmp_path / "store")).abandon(
        eval_run_id, message
    )
    with duckdb.connect(str(warehouse), read_only=True) as connection:
        trace_file, digest, status = connection.sql(
            "SELECT trace_file, trace_digest, status FROM eval_runs WHERE eval_run_id = $run",
            params={"run": eval_run_id},
        ).fetchall()[0]
    assert digest == trace_file_digest(trace_file) and status == "failed"


def test_under_the_bound_a_failed_item_is_in_no_rate(library, tmp_path, fault_service):
    fault_service.fail("not_json", item_id="q2")
    warehouse = tmp_path / "warehouse.duckdb"
    system = HttpSystemResource(base_url=fault_service.url, max_error_share=0.5)
    result = materialize_suite(
        NIGHT, SUITE, fixture_resources(library, warehouse, system=system), assets=fixture_assets()
    )
    assert result.success
    eval_run_id = result.output_for_node("retrieval_run", "retrieval_run")["eval_run_id"]
    with duckdb.connect(str(warehouse), read_only=True) as connection:
        row = connection.sql(
            "SELECT refused, refusal_reason FROM generation_results WHERE item_id = 'q2'"
        ).fetchall()
        assert row == [(True, "system_error:malformed_reply")]
        rates = dict(
            connection.sql(
                "SELECT metric, n FROM generation_metrics WHERE scope = 'overall' "
                "AND scope_value = 'answerable'"
            ).fetchall()
        )
        # Three answerable items, one of them failed: every rate is over the other two.
        assert rates["false_refusal_rate"] == rates["confident_wrong_rate"] == 2
        success = connection.sql(
            "SELECT n FROM retrieval_metrics WHERE scope = 'overall' AND measure = 'Success@5'"
        ).fetchall()
        assert success == [(2,)]
        assert connection.sql(
            "SELECT count(*) FROM generation_item_metrics WHERE item_id = 'q2'"
        ).fetchall() == [(0,)]
        operations = {
            metric: (value, n)
            for metric, value, n in connection.sql(
                "SELECT metric, value, n FROM generation_metrics WHERE scope = 'operations'"
            ).fetchall()
        }
        assert operations["system_errors"] == (1.0, 6)
        assert operations["system_error_rate"] == (pytest.approx(1 / 6), 6)
        assert operations["latency_p50_ms"][1] == 5
        summary = format_summary(headline_from_tables(connection, eval_run_id))
    assert "system errors                1 of 6 (16.7%)" in summary
    # The failed item is named beside the count, with its cause.
    assert "    left out of every figure above: q2 (malformed_reply)\n" in summary


def refused_night(library: Path, tmp_path: Path, service: FaultService) -> str:
    """The fixture night against ``service``, which must fail in its retrieval step: why."""
    system = HttpSystemResource(base_url=service.url)
    result = materialize_suite(
        NIGHT,
        SUITE,
        fixture_resources(library, tmp_path / "warehouse.duckdb", system=system),
        assets=fixture_assets(),
    )
    assert not result.success
    return step_failure(result, "retrieval_run")


def test_a_service_on_another_corpus_state_fails_the_run_naming_both_digests(
    library, tmp_path, fault_service
):
    other = "f" * 64
    fault_service.health_corpus_digest = other
    message = refused_night(library, tmp_path, fault_service)
    snapshot_digest = load_snapshot(library / "2026-10-01").corpus_digest
    assert f"serves corpus state {other} (no snapshot here)" in message
    assert f"evaluates snapshot corpus {snapshot_digest} (snapshot 2026-10-01);" in message
    assert fault_service.bodies == []


def test_a_service_on_another_snapshot_of_the_library_is_named_by_its_folder(
    library, tmp_path, fault_service
):
    """The service still serves the library as an earlier snapshot froze it: the failure names
    that snapshot's folder beside its digest, which a person acts on sooner."""
    from rag_eval_pipeline.lib.inputs.corpus import freeze_snapshot

    later = library / "2026-10-10"
    shutil.copytree(library / "2026-10-01", later, copy_function=shutil.copyfile)
    (later / "manifest.json").unlink()
    log = later / "documents" / "CLEAN-LOG-001@v1.md"
    log.chmod(0o644)
    log.write_text(log.read_text(encoding="utf-8").replace("12 months", "24 months"))
    freeze_snapshot(later)
    earlier = load_snapshot(library / "2026-10-01").corpus_digest
    fault_service.health_corpus_digest = earlier  # the night (2026-10-15) takes 2026-10-10
    message = refused_night(library, tmp_path, fault_service)
    assert f"serves corpus state {earlier} (snapshot 2026-10-01), but" in message
    assert f"{load_snapshot(later).corpus_digest} (snapshot 2026-10-10);" in message


def http_environment(library: Path, tmp_path: Path, service: FaultService) -> dict:
    """``rag-eval nightly``'s environment for the fixture suite against ``service``."""
    return {
        **os.environ,
        "RAG_EVAL_SYSTEM": "http",
        "RAG_EVAL_SYSTEM_URL": service.url,
        "RAG_EVAL_SUITES": str(fixture_suites(library)),
        "RAG_EVAL_WAREHOUSE": str(tmp_path / "warehouse.duckdb"),
        "DAGSTER_HOME": str(tmp_path / "dagster_home"),
    }


def test_the_command_line_marks_the_run_failed_with_the_counts(library, tmp_path, fault_service):
    fault_service.fail("not_json", item_id="q2")
    env = http_environment(library, tmp_path, fault_service)
    completed = subprocess.run(
        [RAG_EVAL, "nightly", "--suite", SUITE, "--partition", NIGHT],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 1, completed.stderr
    counts = (
        "1 of 6 items (16.7%) ended in a system error, above the bound of 2.0%: 1 malformed_reply"
    )
    assert f"error: step retrieval_run failed: {counts}" in completed.stderr
    with duckdb.connect(str(tmp_path / "warehouse.duckdb"), read_only=True) as connection:
        status, reason, trace_file = connection.sql(
            "SELECT status, status_reason, trace_file FROM eval_runs"
        ).fetchall()[0]
    assert status == "failed" and counts in reason
    assert "item q2: malformed reply: not JSON" in reason
    assert Path(trace_file).is_file()


def test_sigterm_while_the_service_answers_exits_143(library, tmp_path, fault_service):
    """SIGTERM while the HTTP system is waiting on the service: the system stops its calls
    (no new one started), the step fails naming the signal, and the process exits with the
    signal's code (143), as an interrupt of any other step does, not 1 as a failed run."""
    import time

    fault_service.latency_s = 2.0
    env = http_environment(library, tmp_path, fault_service)
    process = subprocess.Popen(
        [RAG_EVAL, "nightly", "--suite", SUITE, "--partition", NIGHT],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not fault_service.bodies and time.monotonic() < deadline:
            assert process.poll() is None, process.communicate()
            time.sleep(0.05)
        assert fault_service.bodies, "the service was never asked"
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 128 + signal.SIGTERM, err
    assert "stopped by SIGTERM" in err and "Traceback" not in err
    with duckdb.connect(str(tmp_path / "warehouse.duckdb"), read_only=True) as connection:
        [(status,)] = connection.sql("SELECT status FROM eval_runs").fetchall()
    assert status == "failed"


def test_running_a_complete_live_run_again_never_replaces_its_capture(
    library, tmp_path, fault_service
):
    """The same live run (same identity) run again: the complete run's trace file keeps its
    bytes while the new attempt runs, also when that attempt dies after its live pass; an
    attempt that completes records its own capture, beside the earlier one."""
    warehouse = tmp_path / "warehouse.duckdb"

    def night(**system_settings):
        system = HttpSystemResource(base_url=fault_service.url, **system_settings)
        return materialize_suite(
            NIGHT,
            SUITE,
            fixture_resources(library, warehouse, system=system),
            assets=fixture_assets(),
        )

    def recorded(eval_run_id: str) -> tuple:
        with duckdb.connect(str(warehouse), read_only=True) as connection:
            return connection.sql(
                "SELECT status, trace_file, trace_digest FROM eval_runs WHERE eval_run_id = $run",
                params={"run": eval_run_id},
            ).fetchall()[0]

    fault_service.fail("not_json", item_id="q2")
    first = night(max_error_share=0.5)
    assert first.success
    eval_run_id = first.output_for_node("retrieval_run", "retrieval_run")["eval_run_id"]
    status, trace_file, digest = recorded(eval_run_id)
    assert status == "complete" and trace_file_digest(trace_file) == digest

    # Run again, q2 now an HTTP 500 over the bound: the live pass captures other bytes, then
    # the run fails. The complete run is still complete, and its capture is what it recorded.
    fault_service.fail("server_error", item_id="q2")
    dying = night(max_retries=0)
    assert not dying.success
    WarehouseResource(path=str(warehouse), store=str(tmp_path / "store")).abandon(
        eval_run_id, "the attempt failed"
    )
    assert recorded(eval_run_id) == ("complete", trace_file, digest)
    assert trace_file_digest(trace_file) == digest
    store = RunStore(tmp_path / "store")
    attempt = store.read_json(store.run_dir(eval_run_id) / "run.json")
    assert attempt["trace_file"] != trace_file
    assert trace_file_digest(attempt["trace_file"]) == attempt["trace_digest"]

    # A third attempt without faults completes: its own capture is recorded and was read by
    # its generation step (q2 answered this time); the first capture is still there, unchanged.
    third = night()
    assert third.success
    # Other figures under the same identity: said, naming the earlier capture.
    [summary] = third.asset_materializations_for_node("eval_summary")
    replaced = summary.metadata["replaced_figures"].value
    assert replaced.startswith(f"evaluation run {eval_run_id} had completed (")
    assert " UTC) with other retrieval and generation figures, which this attempt" in replaced
    assert replaced.endswith(f"its capture is still at {trace_file}")
    status, third_file, third_digest = recorded(eval_run_id)
    assert status == "complete" and third_file not in (trace_file, attempt["trace_file"])
    assert Path(third_file).name == f"{eval_run_id}.{third_digest[:12]}.parquet"
    assert trace_file_digest(third_file) == third_digest
    assert trace_file_digest(trace_file) == digest
    with duckdb.connect(str(warehouse), read_only=True) as connection:
        [(refused,)] = connection.sql(
            "SELECT refusal_reason FROM generation_results WHERE eval_run_id = $run "
            "AND item_id = 'q2'",
            params={"run": eval_run_id},
        ).fetchall()
    assert refused != "system_error:malformed_reply"


def test_the_command_line_warns_when_a_run_completes_again_with_other_figures(
    library, tmp_path, fault_service
):
    """The same live run twice from the command line, the service answering one item otherwise
    the second time (a malformed reply, under a raised error bound): a warning says the
    figures were replaced under the same identity; the first time says nothing of it."""
    import yaml

    env = {
        **http_environment(library, tmp_path, fault_service),
        "RAG_EVAL_GATES": str(FIXTURE_GATES),
    }
    config = tmp_path / "run.yaml"
    config.write_text(
        yaml.safe_dump({"resources": {"system": {"config": {"max_error_share": 0.5}}}})
    )

    def night() -> subprocess.CompletedProcess:
        return subprocess.run(
            [RAG_EVAL, "nightly", "--suite", SUITE, "--partition", NIGHT, "--config", str(config)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )

    first = night()
    assert first.returncode == 0, first.stderr
    assert "replaced under the same identity" not in first.stderr
    fault_service.fail("not_json", item_id="q2")
    second = night()
    assert second.returncode == 0, second.stderr
    [warning] = [line for line in second.stderr.splitlines() if "had completed" in line]
    assert warning.startswith("warning: evaluation run ")
    assert "which this attempt replaced under the same identity" in warning
