"""The HTTP system under test against real servers on 127.0.0.1, fault by fault.

The service is the reference system over the fixture library behind ``FaultService``, which plays
scripted faults. Every fault ends as the protocol says (``docs/SYSTEM_API.md``): retried where
worth it, otherwise a system error naming the item, the cause (and the field), recorded in the
capture, and never counted as an answer, a refusal or a success.
"""

import _thread
import datetime as dt
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from email.utils import format_datetime
from pathlib import Path

import duckdb
import polars as pl
import pytest

from rag_eval_pipeline.lib.deployment import Deployment
from rag_eval_pipeline.lib.errors import ConfigError
from rag_eval_pipeline.lib.inputs.corpus import load_snapshot, snapshot_tables
from rag_eval_pipeline.lib.inputs.golden import load_golden_set
from rag_eval_pipeline.lib.inputs.traces import load_traces
from rag_eval_pipeline.lib.store.warehouse import upgrade
from rag_eval_pipeline.lib.systems import calls
from rag_eval_pipeline.lib.systems.http import (
    ClientSettings,
    HttpSystem,
    RunStopped,
    ServiceError,
)
from rag_eval_pipeline.lib.systems.reference import ReferenceConfig, ReferenceSystem
from rag_eval_pipeline.lib.systems.run import generation_results, queries_of, retrieval_results
from rag_eval_pipeline.lib.systems.service import ReferenceAnswers
from rag_eval_pipeline.testing.fault_service import UNKNOWN_PASSAGE_ID, FaultService

from .conftest import FIXTURES

SNAPSHOT = FIXTURES / "library" / "2026-10-01"
SETTINGS = ReferenceConfig(evidence_threshold=1.0)
FAST = {"backoff_s": 0.01, "timeout_s": 5.0, "max_retries": 2}
KEY_ENV = "RAG_EVAL_TEST_SYSTEM_KEY"
API_KEY = "sk-system-test-3c2b1a-DO-NOT-LEAK"


@pytest.fixture(scope="module")
def snapshot() -> dict:
    """The fixture snapshot's passages and digest, its golden items in line order, and the
    reference system's answers over them."""
    loaded = load_snapshot(SNAPSHOT)
    passages = snapshot_tables(loaded, loaded_at=dt.datetime(2026, 10, 15))["corpus_passages"]
    items = load_golden_set(FIXTURES / "library" / "golden.jsonl").items.sort("line")
    answers = ReferenceAnswers(passages, loaded.corpus_digest, settings=SETTINGS)
    return {
        "passages": passages,
        "digest": loaded.corpus_digest,
        "items": items,
        "queries": queries_of(items),
        "answers": answers,
    }


@pytest.fixture
def serve(snapshot) -> Iterator[Callable[..., FaultService]]:
    """Start a fault service over the fixture library (stopped after the test)."""
    started: list[FaultService] = []

    def start(**options) -> FaultService:
        service = FaultService(snapshot["answers"], **options).start()
        started.append(service)
        return service

    yield start
    for service in started:
        service.stop()


@pytest.fixture
def client(snapshot, tmp_path) -> Callable[..., HttpSystem]:
    """An HTTP system pointed at a service, capturing into the test's folder."""

    def build(service: FaultService, **settings) -> HttpSystem:
        options = {
            key: settings.pop(key)
            for key in ("api_key_env", "allow_corpus_mismatch")
            if key in settings
        }
        return HttpSystem(
            service.url,
            snapshot["passages"],
            capture=tmp_path / "traces" / "run.parquet",
            settings=ClientSettings(**{**FAST, **settings}),
            **options,
        )

    return build


@pytest.fixture
def ask(snapshot, client) -> Callable[..., tuple[HttpSystem, list, list[calls.CallOutcome]]]:
    """Run the live pass of an HTTP system against a service: (system, hits, outcomes)."""

    def run(service: FaultService, **settings) -> tuple[HttpSystem, list, list]:
        system = client(service, **settings)
        hits = system.retrieve_batch(snapshot["queries"], 20)
        return system, hits, system.call_outcomes(snapshot["queries"])

    return run


def by_item(outcomes: list[calls.CallOutcome]) -> dict[str, calls.CallOutcome]:
    return {outcome.item_id: outcome for outcome in outcomes}


def test_a_clean_run_gives_the_in_process_reference_traces(snapshot, serve, ask):
    service = serve(latency_ms=50)
    system, hits, outcomes = ask(service, concurrency=3)
    reference = ReferenceSystem(snapshot["passages"], SETTINGS)
    queries = snapshot["queries"]
    assert hits == reference.retrieve_batch(queries, 20)
    assert system.respond_batch(queries, hits, 5) == reference.respond_batch(queries, hits, 5)
    assert [o.outcome for o in outcomes] == [calls.OK] * len(queries)
    assert all(o.attempts == 1 and o.latency_ms >= 50 for o in outcomes)
    assert system.stats.requests == len(queries) and system.stats.retries == 0
    # The protocol's request, and never more in flight than the concurrency.
    assert sorted(b["item_id"] for b in service.bodies) == sorted(q.item_id for q in queries)
    assert {(b["k"], b["language"]) for b in service.bodies} == {(20, "en")}
    assert service.max_in_flight == 3
    capture = load_traces(system.captured)
    assert capture["item_id"].to_list() == [q.item_id for q in queries]
    assert set(capture["system_version"]) == {snapshot["answers"].system_version}


def test_rate_limits_are_retried_after_the_wait_the_server_asks_for(serve, ask):
    service = serve()
    service.fail("rate_limit", item_id="q1", retry_after="1")
    moment = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=2)
    service.fail("rate_limit", item_id="q2", retry_after=format_datetime(moment, usegmt=True))
    started = time.monotonic()
    system, _, outcomes = ask(service)
    wall = time.monotonic() - started
    found = by_item(outcomes)
    assert found["q1"].outcome == found["q2"].outcome == calls.OK
    assert found["q1"].attempts == found["q2"].attempts == 2
    assert service.requests_by_item["q1"] == service.requests_by_item["q2"] == 2
    # Retry-After 1 s and an HTTP date about 2 s ahead (whole seconds: at least 1 s), not the
    # 10 ms backoff.
    assert wall >= 1.0
    assert system.stats.retries == 2 and system.stats.errors == 0


def test_server_errors_are_retried_then_recorded_as_system_errors(snapshot, serve, ask):
    service = serve()
    service.fail("server_error", item_id="q3")  # transient: the retry answers
    service.fail("server_error", item_id="q2", times=3)  # every attempt fails
    system, hits, outcomes = ask(service, max_retries=2)
    found = by_item(outcomes)
    assert found["q3"].outcome == calls.OK and found["q3"].attempts == 2
    failed = found["q2"]
    assert failed.outcome == calls.SYSTEM_ERROR and failed.cause == calls.HTTP_STATUS
    # The URL and what the service said, whitespace collapsed.
    assert failed.error == (
        f'item q2: HTTP 500 from {service.url}/query, saying \'{{"error": "internal error"}}\' '
        "(3 attempts)"
    )
    assert failed.attempts == 3 and service.requests_by_item["q2"] == 3
    # Nothing retrieved, nothing answered: a system error is not a refusal by the system.
    assert hits[1] == []
    responses = system.respond_batch(snapshot["queries"], hits, 5)
    assert responses[1].refusal_reason == "system_error:http_status"
    assert [o.failed for o in outcomes].count(True) == 1 and system.stats.errors == 1


def test_a_hang_past_the_timeout_and_a_connection_reset(serve, ask):
    service = serve()
    service.fail("hang", item_id="q3", times=2, seconds=3.0)
    service.fail("reset", item_id="q1")
    service.fail("reset", item_id="q5", times=2)
    started = time.monotonic()
    _, _, outcomes = ask(service, timeout_s=0.3, max_retries=1)
    # Waiting out the hangs would take 6 s; the bound leaves room for a loaded machine.
    assert time.monotonic() - started < 5.0
    found = by_item(outcomes)
    assert found["q3"].cause == calls.TIMEOUT
    assert found["q3"].error == (
        f"item q3: timed out after 0.3 s waiting for {service.url}/query (2 attempts)"
    )
    assert found["q1"].outcome == calls.OK and found["q1"].attempts == 2
    assert found["q5"].cause == calls.CONNECTION
    assert found["q5"].error.startswith(f"item q5: connection to {service.url}/query failed (")
    assert sum(o.failed for o in outcomes) == 2


def test_malformed_replies_name_the_item_and_the_field_and_are_not_retried(snapshot, serve, ask):
    service = serve()
    service.fail("not_json", item_id="q1")
    service.fail("missing_field", item_id="q2", field="answer")
    service.fail("bad_field", item_id="q3", field="refused", value="no")
    service.fail("unknown_passage", item_id="q5")
    service.fail("empty_answer", item_id="q6")
    system, _, outcomes = ask(service)
    found = by_item(outcomes)
    assert found["q1"].error == (
        "item q1: malformed reply: not JSON (text/html), saying "
        "'<html>Service temporarily unavailable</html>'"
    )
    assert found["q2"].error == "item q2: malformed reply: trace is missing the field(s) answer"
    assert found["q3"].error == (
        "item q3: malformed reply: 'refused' must be true or false, got 'no'"
    )
    assert found["q5"].cause == calls.UNKNOWN_PASSAGE
    assert found["q5"].error == (
        f"item q5: 'retrieved' names passage '{UNKNOWN_PASSAGE_ID}', which is not in the "
        "snapshot being evaluated (1 unknown id(s) in 'retrieved')"
    )
    # Scored as given, an empty answer not refused would be a confident wrong one.
    assert found["q6"].error == (
        "item q6: malformed reply: 'answer' is empty but 'refused' is false: a system that "
        "declines says 'refused': true (an empty answer would be scored as a confident wrong one)"
    )
    assert {found[i].cause for i in ("q1", "q2", "q3", "q6")} == {calls.MALFORMED_REPLY}
    assert all(service.requests_by_item[i] == 1 for i in ("q1", "q2", "q3", "q5", "q6"))
    assert [o.item_id for o in outcomes if not o.failed] == ["q4"]
    # The capture is a trace file the replay can read: the unknown id never reaches it.
    capture = load_traces(system.captured)
    retrieved = capture.explode("retrieved")["retrieved"].drop_nulls().struct.field("passage_id")
    assert UNKNOWN_PASSAGE_ID not in retrieved.to_list()
    errored = capture.filter(pl.col("refused") & pl.col("refusal_reason").str.starts_with("system"))
    assert errored["item_id"].to_list() == ["q1", "q2", "q3", "q5", "q6"]


def test_an_answer_citing_outside_its_context_is_recorded_for_citation_validity(
    snapshot, serve, client
):
    service = serve()
    # A passage of the snapshot (of a withdrawn document) that is in no context.
    service.fail("cite_outside_context", item_id="q1", passage_id="XFER-FAX-001@v1#s1")
    system = client(service)
    retrieved = retrieval_results(system, snapshot["items"], snapshot["passages"], 20)
    assert by_item(system.call_outcomes(snapshot["queries"]))["q1"].outcome == calls.OK
    results = generation_results(system, snapshot["items"], retrieved, 5)
    row = results.filter(pl.col("item_id") == "q1").row(0, named=True)
    assert row["refused"] is False and row["citation_valid"] is False
    assert not set(row["cited_ids"]) <= set(row["context_ids"])


def test_a_service_on_another_corpus_state_is_refused_before_the_first_question(
    snapshot, serve, ask
):
    other = "0" * 64
    service = serve(health_corpus_digest=other)
    with pytest.raises(ServiceError) as refused:
        ask(service)
    assert other in str(refused.value) and snapshot["digest"] in str(refused.value)
    assert service.bodies == []
    # Allowed explicitly, the run goes ahead and the allowance is part of its configuration.
    system, _, outcomes = ask(service, allow_corpus_mismatch=True)
    assert system.config()["allow_corpus_mismatch"] is True
    assert all(not o.failed for o in outcomes)


def test_the_deadline_turns_what_is_left_into_system_errors(serve, ask):
    service = serve()
    for item in ("q1", "q2", "q3", "q4", "q5", "q6"):
        service.fail("hang", item_id=item, seconds=5.0)
    started = time.monotonic()
    _, _, outcomes = ask(service, deadline_s=0.5, concurrency=2)
    # Without the deadline the hangs take 5 s or more.
    assert time.monotonic() - started < 4.5
    assert {o.cause for o in outcomes} == {calls.DEADLINE_EXCEEDED}
    assert all("deadline exceeded (0.5 s for the run)" in o.error for o in outcomes)


@pytest.mark.parametrize("stop", ["SIGTERM", "KeyboardInterrupt"])
def test_a_stop_takes_effect_at_once_and_starts_no_new_call(serve, ask, stop):
    service = serve()
    for item in ("q1", "q2", "q3", "q4", "q5", "q6"):
        service.fail("hang", item_id=item, seconds=20.0)
    interrupt = (
        (lambda: os.kill(os.getpid(), signal.SIGTERM))
        if stop == "SIGTERM"
        else _thread.interrupt_main
    )
    expected = RunStopped if stop == "SIGTERM" else KeyboardInterrupt

    def ours(signum, frame):  # stands in for whatever handler the process had
        raise AssertionError("SIGTERM reached the previous handler")

    previous = signal.signal(signal.SIGTERM, ours)
    # Ctrl-C raises KeyboardInterrupt through Python's own SIGINT handler; a test run started in
    # the background has SIGINT ignored, and ``interrupt_main`` then does nothing.
    previous_sigint = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        timer = threading.Timer(0.4, interrupt)
        started = time.monotonic()
        timer.start()
        with pytest.raises(expected):
            ask(service, concurrency=2, timeout_s=30.0)
        stopped_after = time.monotonic() - started
        assert signal.getsignal(signal.SIGTERM) is ours
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_sigint)
    # The calls in flight hang for 20 s: a stop that waited for them would take that long.
    assert stopped_after < 10.0
    time.sleep(0.3)
    # One /health, then only the two calls that were in flight: nothing new started.
    assert service.request_count == 3


def test_the_key_is_sent_from_its_variable_and_never_shown(
    library, serve, ask, monkeypatch, tmp_path
):
    service = serve(api_key=API_KEY)
    monkeypatch.delenv(KEY_ENV, raising=False)
    with pytest.raises(ConfigError, match=KEY_ENV):
        ask(service, api_key_env=KEY_ENV)
    monkeypatch.setenv(KEY_ENV, API_KEY)
    system, _, outcomes = ask(service, api_key_env=KEY_ENV)
    assert all(service.authorized) and all(not o.failed for o in outcomes)
    assert API_KEY not in json.dumps(system.config()) + repr(system)
    assert API_KEY.encode() not in system.captured.read_bytes()
    monkeypatch.setenv(KEY_ENV, "sk-wrong")
    with pytest.raises(ServiceError) as refused:
        ask(service, api_key_env=KEY_ENV)
    assert KEY_ENV in str(refused.value) and "sk-wrong" not in str(refused.value)
    # Without a key variable the 401 says that no key was sent, and where to name one.
    with pytest.raises(ServiceError, match="HTTP 401: no key was sent; name the variable"):
        ask(service)


def test_a_url_without_its_scheme_or_with_no_such_endpoint_says_so(serve):
    from rag_eval_pipeline.lib.systems.http import fetch_health

    service = serve()
    bare = service.url.removeprefix("http://")
    with pytest.raises(ServiceError, match=rf"needs its scheme, e\.g\. http://{bare}"):
        fetch_health(bare)
    with pytest.raises(ServiceError, match="HTTP 404: no such endpoint there; check the URL"):
        fetch_health(f"{service.url}/no/such/prefix")


def test_client_settings_and_the_deployment_refuse_what_cannot_work():
    with pytest.raises(ConfigError, match="'concurrency' must be a whole number from 1"):
        ClientSettings(concurrency=0)
    with pytest.raises(ConfigError, match="RAG_EVAL_SYSTEM_URL must be set"):
        Deployment.from_environment({"RAG_EVAL_SYSTEM": "http"})
    chosen = Deployment.from_environment(
        {
            "RAG_EVAL_SYSTEM": "http",
            "RAG_EVAL_SYSTEM_URL": "http://127.0.0.1:8765",
            "RAG_EVAL_SYSTEM_KEY_ENV": KEY_ENV,
        }
    )
    assert (chosen.system_url, chosen.system_key_env) == ("http://127.0.0.1:8765", KEY_ENV)


def test_an_earlier_warehouse_gains_the_capture_columns(tmp_path: Path):
    connection = duckdb.connect(str(tmp_path / "old.duckdb"))
    upgrade(connection)
    connection.execute("DROP VIEW eval_runs")
    connection.execute("ALTER TABLE eval_run_records DROP COLUMN trace_file")
    connection.execute("ALTER TABLE eval_run_records DROP COLUMN trace_digest")
    upgrade(connection)
    upgrade(connection)
    columns = {row[0] for row in connection.sql("DESCRIBE eval_runs").fetchall()}
    assert {"trace_file", "trace_digest"} <= columns
    connection.close()


def test_the_reference_service_is_ready_before_it_listens(snapshot):
    """The index is built and one answer given when the service is made, so a night's first
    requests do not wait for its start-up (which a night's latency figures would count)."""
    from rag_eval_pipeline.lib.systems.service import ReferenceService

    answers = ReferenceAnswers(snapshot["passages"], snapshot["digest"], settings=SETTINGS)
    assert answers.system._index is None
    service = ReferenceService(answers)
    try:
        assert answers.system._index is not None
        assert service.request_count == 0
    finally:
        service.stop()


def test_the_reference_service_reports_another_version_for_another_context_k(snapshot):
    """context_k changes the served answers, so it changes the reported system_version (and
    so the evaluation run's identity); the same settings report the same version."""

    def version(**settings) -> str:
        served = ReferenceAnswers(
            snapshot["passages"], snapshot["digest"], settings=SETTINGS, **settings
        )
        return served.health()["system_version"]

    assert version() == version(context_k=5) == snapshot["answers"].system_version
    assert version(context_k=1) != version()
    assert version(context_k=1).startswith("reference-bm25 ")
