"""Trace files (JSONL and Parquet) and the replay system that serves them.

Bad traces fail naming the file, the line (or Parquet row) and the problem; the replay serves
each question its own trace, by item id or by text, in file order when texts repeat.
"""

import json
import re
from pathlib import Path

import polars as pl
import pytest

from rag_eval_pipeline.defs.resources import ReplaySystemResource
from rag_eval_pipeline.lib.inputs.traces import TRACE_SCHEMA, TraceError, load_traces
from rag_eval_pipeline.lib.systems.protocol import Hit, Query
from rag_eval_pipeline.lib.systems.replay import ReplaySystem

DIGEST = "4b978a8e47bf565fca00ecee458a8a05b0ba98941a4c19df444175616c517bac"


def trace(**fields) -> dict:
    """An answered trace with one retrieved passage; ``fields`` override."""
    return {
        "item_id": "q1",
        "question": "how soon do blood tubes need labelling",
        "retrieved": [
            {"passage_id": "LAB-LABEL-001@v2#s1", "score": 4.5, "rank": 2},
            {"passage_id": "LAB-LABEL-001@v2#s2", "score": 7.25, "rank": 1},
        ],
        "context_ids": ["LAB-LABEL-001@v2#s2", "LAB-LABEL-001@v2#s1"],
        "answer": "Within 15 minutes of collection. [LAB-LABEL-001@v2#s2]",
        "cited_ids": ["LAB-LABEL-001@v2#s2"],
        "refused": False,
        "refusal_reason": None,
        "system_version": "ward-assistant 2.3.1",
        "corpus_digest": DIGEST,
        **fields,
    }


def write_jsonl(path: Path, records: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_load_jsonl_reads_every_field_and_orders_hits_by_rank(tmp_path):
    path = tmp_path / "traces.jsonl"
    refused = trace(
        item_id=None,
        question="what dose of paracetamol",
        retrieved=[],
        context_ids=[],
        answer="",
        cited_ids=[],
        refused=True,
        refusal_reason="input_check:out_of_scope",
    )
    write_jsonl(path, [trace(extra="ignored")])
    with path.open("a", encoding="utf-8") as handle:
        handle.write("\n" + json.dumps({k: v for k, v in refused.items() if k != "item_id"}) + "\n")
    traces = load_traces(path)
    assert traces.schema == pl.Schema(TRACE_SCHEMA)
    assert traces["line"].to_list() == [1, 3]
    # Without an item id a trace is known by file and line.
    assert traces["trace_id"].to_list() == ["q1", "traces.jsonl:3"]
    first = traces.row(0, named=True)
    assert [h["rank"] for h in first["retrieved"]] == [1, 2]
    assert first["retrieved"][0] == {
        "passage_id": "LAB-LABEL-001@v2#s2",
        "score": 7.25,
        "rank": 1,
    }
    assert (first["refused"], first["cited_ids"]) == (False, ["LAB-LABEL-001@v2#s2"])
    second = traces.row(1, named=True)
    assert (second["item_id"], second["refused"], second["refusal_reason"]) == (
        None,
        True,
        "input_check:out_of_scope",
    )


def test_load_parquet_gives_the_same_frame(tmp_path):
    jsonl = write_jsonl(tmp_path / "t.jsonl", [trace(), trace(item_id="q2", question="other")])
    from_jsonl = load_traces(jsonl)
    parquet = tmp_path / "t.parquet"
    from_jsonl.drop("line", "trace_id").write_parquet(parquet)
    from_parquet = load_traces(parquet)
    assert from_parquet.equals(from_jsonl)


@pytest.mark.parametrize(
    ("record", "problem"),
    [
        ("not json", "malformed JSON at column 1: Expecting value"),
        ('{"question": "cut', "malformed JSON: Unterminated string starting at column 14"),
        ([1, 2], "expected a JSON object, got list"),
        ({"question": "q"}, "missing the field(s) retrieved, context_ids, answer"),
        (
            {k if k != "cited_ids" else "cited": v for k, v in trace().items()} | {"cost": 0.1},
            "missing the field(s) cited_ids (it has field(s) the format does not name: cited)",
        ),
        (trace(question="  "), "'question' must be a non-empty string"),
        (trace(refused="no"), "'refused' must be true or false, got 'no'"),
        (trace(item_id=""), "'item_id' must be a non-empty string or null"),
        (trace(cited_ids="A@v1#s1"), "'cited_ids' must be a list of non-empty passage id"),
        (trace(corpus_digest=None), "'corpus_digest' must be a non-empty string"),
        (trace(refusal_reason=3), "'refusal_reason' must be a string or null"),
        (trace(retrieved={"a": 1}), "'retrieved' must be a list"),
        (
            trace(retrieved=[{"passage_id": "A@v1#s1", "score": 1.0}]),
            "retrieved[1] must be an object with 'passage_id', 'score' and 'rank'",
        ),
        (
            trace(retrieved=[{"passage_id": "A@v1#s1", "score": "high", "rank": 1}]),
            "retrieved[1]: 'score' must be a finite number, got 'high'",
        ),
        (
            trace(retrieved=[{"passage_id": "A@v1#s1", "score": 1.0, "rank": 0}]),
            "retrieved[1]: 'rank' must be an integer from 1, got 0",
        ),
        (
            trace(
                retrieved=[
                    {"passage_id": "A@v1#s1", "score": 2.0, "rank": 1},
                    {"passage_id": "B@v1#s1", "score": 1.0, "rank": 1},
                ]
            ),
            "'retrieved' gives a rank twice",
        ),
    ],
)
def test_a_bad_trace_names_file_line_and_problem(tmp_path, record, problem):
    path = tmp_path / "traces.jsonl"
    good = json.dumps(trace(item_id="q0"))
    bad = record if isinstance(record, str) else json.dumps(record)
    path.write_text(f"{good}\n\n{bad}\n", encoding="utf-8")
    with pytest.raises(TraceError, match=rf"^{re.escape(str(path))}:3: .*{re.escape(problem)}"):
        load_traces(path)


def test_a_repeated_item_id_names_both_lines(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", [trace(), trace(question="again")])
    with pytest.raises(TraceError, match=rf"^{re.escape(str(path))}:2: .*'q1' already .*line 1"):
        load_traces(path)


def test_a_bad_parquet_row_is_named_by_row(tmp_path):
    path = tmp_path / "t.parquet"
    frame = load_traces(write_jsonl(tmp_path / "t.jsonl", [trace(), trace(item_id="q2")]))
    frame.drop("line", "trace_id").with_columns(
        system_version=pl.Series(["v1", None], dtype=pl.String)
    ).write_parquet(path)
    with pytest.raises(TraceError, match=rf"^{re.escape(str(path))}: row 2: 'system_version'"):
        load_traces(path)
    frame.drop("line", "trace_id", "answer").write_parquet(path)
    with pytest.raises(TraceError, match=r"Parquet file lacks the column\(s\) answer"):
        load_traces(path)


@pytest.mark.parametrize(
    ("name", "content", "problem"),
    [
        ("t.jsonl", None, "trace file does not exist"),
        ("t.csv", "a,b\n", "unknown trace file type '.csv'"),
        ("t.jsonl", "\n\n", "trace file holds no traces"),
        ("t.parquet", "not parquet", "not a readable Parquet file"),
    ],
)
def test_an_unusable_trace_file_is_named(tmp_path, name, content, problem):
    path = tmp_path / name
    if content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(TraceError, match=rf"^{re.escape(str(path))}: {re.escape(problem)}"):
        load_traces(path)


def test_a_trace_file_that_is_not_utf8_names_the_line_and_the_byte(tmp_path):
    path = tmp_path / "traces.jsonl"
    first = (json.dumps(trace(item_id="q0")) + "\n").encode()
    path.write_bytes(
        first + json.dumps(trace(answer="caf\u00e9"), ensure_ascii=False).encode("latin-1")
    )
    offset = first.index(b"\n") + 1 + path.read_bytes()[len(first) :].index(b"\xe9")
    with pytest.raises(
        TraceError,
        match=rf"^{re.escape(str(path))}:2: not UTF-8 text \(invalid .* at byte offset {offset}\)",
    ):
        load_traces(path)


# --- the replay system --------------------------------------------------------------------


@pytest.fixture
def traces_path(tmp_path) -> Path:
    """q1 answered; q2 and q3 ask the same question (answered, then refused)."""
    repeated = "where does the fridge log go"
    return write_jsonl(
        tmp_path / "traces.jsonl",
        [
            trace(),
            trace(
                item_id="q2",
                question=repeated,
                retrieved=[{"passage_id": "STORE-FRIDGE-001@v1#s1", "score": 5.0, "rank": 1}],
                context_ids=["STORE-FRIDGE-001@v1#s1"],
                answer="In the blue folder. [STORE-FRIDGE-001@v1#s1]",
                cited_ids=["STORE-FRIDGE-001@v1#s1"],
            ),
            trace(
                item_id="q3",
                question=repeated,
                retrieved=[],
                context_ids=[],
                answer="",
                cited_ids=[],
                refused=True,
                refusal_reason="evidence_check:no_current_passage_above_threshold",
            ),
        ],
    )


def test_replay_serves_the_recorded_retrieval_and_answer(traces_path):
    replay = ReplaySystem(traces_path)
    question = "how soon do blood tubes need labelling"
    asked = [Query(None, question)]
    assert replay.retrieve_batch(asked, 1) == [[Hit("LAB-LABEL-001@v2#s2", 7.25, 1)]]
    # The context as sent is replayed whatever hits and context size the caller passes.
    [response] = replay.respond_batch(asked, [[]], 1)
    assert not response.refused
    assert response.answer.endswith("[LAB-LABEL-001@v2#s2]")
    assert response.context_ids == ("LAB-LABEL-001@v2#s2", "LAB-LABEL-001@v2#s1")
    assert response.cited_ids == ("LAB-LABEL-001@v2#s2",)
    assert response.best_score == 7.25


def test_replay_serves_repeated_questions_in_file_order(traces_path):
    replay = ReplaySystem(traces_path)
    repeated = "where does the fridge log go"
    hits = replay.retrieve_batch(
        [Query(None, q) for q in (repeated, "how soon do blood tubes need labelling", repeated)], 5
    )
    assert [len(h) for h in hits] == [1, 2, 0]
    answers = [replay.respond_batch([Query(None, repeated)], [[]], 5)[0] for _ in range(3)]
    assert [a.refused for a in answers] == [False, True, False]
    assert answers[1].refusal_reason == "evidence_check:no_current_passage_above_threshold"
    assert answers[1].best_score is None


def test_replay_prefers_the_item_id_when_given(traces_path):
    replay = ReplaySystem(traces_path)
    repeated = "where does the fridge log go"
    assert replay.respond_batch([Query("q3", repeated)], [[]], 5)[0].refused
    assert replay.retrieve_batch([Query("q3", repeated), Query("q2", repeated)], 5)[0] == []


def test_replay_without_a_trace_for_the_question_fails(traces_path):
    replay = ReplaySystem(traces_path)
    with pytest.raises(TraceError, match=r"traces.jsonl: no trace for question 'unknown\?'"):
        replay.retrieve_batch([Query(None, "unknown?")], 5)


def test_replay_refuses_traces_from_another_corpus_state(traces_path):
    passages = pl.DataFrame({"passage_id": ["LAB-LABEL-001@v2#s1", "LAB-LABEL-001@v2#s2"]})
    with pytest.raises(
        TraceError,
        match=rf"^{re.escape(str(traces_path))}:2: passage 'STORE-FRIDGE-001@v1#s1' is not in "
        r"the corpus snapshot \(1 unknown passage id\(s\) in all\)",
    ):
        ReplaySystem(traces_path, passages)


def test_a_different_trace_file_is_a_different_configuration(traces_path, tmp_path):
    resource = ReplaySystemResource(path=str(traces_path))
    config = resource.config()
    assert config["system_id"] == "replay"
    assert config == ReplaySystem(traces_path).config()
    other = write_jsonl(tmp_path / "other.jsonl", [trace(answer="Within 4 hours.")])
    other_config = ReplaySystemResource(path=str(other)).config()
    assert other_config["trace_digest"] != config["trace_digest"]
    # The same content at another path replays alike.
    copy = tmp_path / "copy" / "traces.jsonl"
    copy.parent.mkdir()
    copy.write_bytes(traces_path.read_bytes())
    assert ReplaySystemResource(path=str(copy)).config() == config


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        (
            {"answer": " ", "cited_ids": [], "refused": False},
            "'answer' is empty but 'refused' is false: a system that declines says "
            "'refused': true (an empty answer would be scored as a confident wrong one)",
        ),
        (
            {
                "retrieved": [
                    {"passage_id": "A@v1#s1", "score": 2.0, "rank": 1},
                    {"passage_id": "B@v1#s1", "score": 1.5, "rank": 2},
                    {"passage_id": "A@v1#s1", "score": 1.0, "rank": 3},
                ]
            },
            "'retrieved' lists passage 'A@v1#s1' twice (ranks 1 and 3); list each passage once",
        ),
    ],
    ids=["empty-answer-not-refused", "passage-listed-twice"],
)
def test_what_would_be_scored_wrongly_is_refused_from_the_system_only(tmp_path, fields, problem):
    """An empty (or blank) answer with ``refused: false`` would be scored as a confident wrong
    one, and a passage listed twice as two relevant results (recall above 1): a replayed file
    (and a live reply, ``test_http_system``) is refused naming the line; a production trace,
    only judged, is read as it is."""
    path = write_jsonl(
        tmp_path / "t.jsonl", [trace(), trace(item_id="q2", question="q two", **fields)]
    )
    assert load_traces(path).height == 2
    with pytest.raises(TraceError) as raised:
        ReplaySystem(path)
    assert str(raised.value) == f"{path}:2: {problem}"


def test_a_line_separator_inside_a_trace_string_does_not_end_the_line(tmp_path):
    """JSON strings may hold U+2028 as it is (``json.dumps(..., ensure_ascii=False)``): the trace
    stays one line, numbered as a line feed numbers it."""
    path = tmp_path / "traces.jsonl"
    records = [trace(item_id="q0", answer="one\u2028two"), trace(item_id="q1")]
    path.write_text(
        "\n".join(json.dumps(r, ensure_ascii=False) for r in records) + "\n", encoding="utf-8"
    )
    loaded = load_traces(path)
    assert loaded.height == 2
    assert "one\u2028two" in loaded["answer"].to_list()


# --- a replayed file that does not fit the night ------------------------------------------


def test_replay_refuses_a_trace_recorded_on_another_corpus_state(tmp_path):
    path = write_jsonl(
        tmp_path / "traces.jsonl",
        [trace(), trace(item_id="q2", corpus_digest="0" * 64), trace(item_id="q3")],
    )
    passages = pl.DataFrame(
        {
            "passage_id": ["LAB-LABEL-001@v2#s1", "LAB-LABEL-001@v2#s2"],
            "corpus_digest": [DIGEST, DIGEST],
        }
    )
    with pytest.raises(
        TraceError,
        match=rf"^{re.escape(str(path))}:2: trace recorded on corpus state 0{{64}}, not on the "
        rf"snapshot being evaluated \({DIGEST}; 1 trace\(s\) from another corpus state in all\)",
    ):
        ReplaySystem(path, passages)
    # A capture of a live run allowed to serve another corpus state replays as it was.
    assert ReplaySystem(path, passages, allow_corpus_mismatch=True).traces.height == 3
    resource = ReplaySystemResource(path=str(path), allow_corpus_mismatch=True)
    assert resource.config()["allow_corpus_mismatch"] is True
    assert "allow_corpus_mismatch" not in ReplaySystemResource(path=str(path)).config()


GOLDEN_ITEMS = pl.DataFrame(
    {
        "item_id": ["q1", "q2"],
        "question": ["how soon do blood tubes need  labelling", "which fridge form"],
        "line": [1, 2],
    }
)


def test_replay_refuses_a_trace_of_an_item_the_golden_set_lacks(tmp_path):
    path = write_jsonl(tmp_path / "traces.jsonl", [trace(), trace(item_id="q9")])
    with pytest.raises(
        TraceError,
        match=rf"^{re.escape(str(path))}:2: item_id 'q9' is not an item of the golden set "
        r"golden.jsonl",
    ):
        ReplaySystem(path).check_golden(GOLDEN_ITEMS, "golden.jsonl")


def test_replay_refuses_a_trace_asking_another_question_than_its_item(tmp_path):
    path = write_jsonl(
        tmp_path / "traces.jsonl",
        [trace(), trace(item_id="q2", question="where do I send the fridge log")],
    )
    with pytest.raises(
        TraceError,
        match=rf"^{re.escape(str(path))}:2: item 'q2' asks 'where do I send the fridge log', but "
        r"the golden item asks 'which fridge form' \(golden.jsonl:2\)",
    ):
        ReplaySystem(path).check_golden(GOLDEN_ITEMS, "golden.jsonl")
    # Spacing aside the question is the item's; a trace without an item id is found by text.
    write_jsonl(path, [trace(), trace(item_id=None, question="anything")])
    ReplaySystem(path).check_golden(GOLDEN_ITEMS, "golden.jsonl")


def test_a_replay_trace_file_that_does_not_exist_is_a_trace_error(tmp_path):
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(TraceError, match=rf"^{re.escape(str(missing))}: trace file does not exist"):
        ReplaySystemResource(path=str(missing)).config()


def golden_replay(library: Path, path: Path) -> Path:
    """A replay of the fixture's golden set that refuses every item, on its snapshot."""
    digest = json.loads((library / "2026-10-01" / "manifest.json").read_text())["corpus_digest"]
    items = [
        json.loads(line) for line in (library / "golden.jsonl").read_text().splitlines() if line
    ]
    refused = {"retrieved": [], "context_ids": [], "answer": "", "cited_ids": [], "refused": True}
    return write_jsonl(
        path,
        [
            trace(item_id=item["id"], question=item["question"], corpus_digest=digest, **refused)
            for item in items
        ],
    )


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"corpus_digest": "0" * 64}, "trace recorded on corpus state 0000"),
        ({"item_id": "q999"}, "item_id 'q999' is not an item of the golden set"),
        ({"question": "what is the wifi password"}, "item 'q2' asks 'what is the wifi password'"),
    ],
)
def test_a_replay_night_refuses_a_trace_file_that_does_not_fit_it(
    library, tmp_path, change, problem
):
    import duckdb

    from .conftest import materialize_night

    path = golden_replay(library, tmp_path / "replay.jsonl")
    assert materialize_night(
        library, tmp_path / "good.duckdb", system=ReplaySystemResource(path=str(path))
    ).success
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[1] = json.dumps({**json.loads(lines[1]), **change})
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    warehouse = tmp_path / "bad.duckdb"
    result = materialize_night(library, warehouse, system=ReplaySystemResource(path=str(path)))
    assert not result.success
    [failure] = [event for event in result.all_events if event.is_step_failure]
    assert failure.step_key == "retrieval_run.plan_retrieval"
    error = failure.event_specific_data.error
    message = "".join(part.message for part in (error, error.cause) if part is not None)
    assert f"{path}:2: {problem}" in message, message
    if warehouse.exists():
        with duckdb.connect(str(warehouse), read_only=True) as connection:
            assert connection.sql("SELECT count(*) FROM eval_runs").fetchall() == [(0,)]


def test_a_replay_block_in_a_run_file_keeps_the_environments_trace_file():
    from rag_eval_pipeline.cli.nightly import with_deployment_system
    from rag_eval_pipeline.lib.deployment import Deployment

    deployment = Deployment.from_environment(
        {"RAG_EVAL_SYSTEM": "replay", "RAG_EVAL_TRACES": "traces/night.parquet"}
    )
    file = {"resources": {"system": {"config": {"allow_corpus_mismatch": True}}}}
    assert with_deployment_system(file, deployment)["resources"]["system"]["config"] == {
        "allow_corpus_mismatch": True,
        "path": "traces/night.parquet",
    }
