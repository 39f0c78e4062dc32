"""Production traces from the trace store are sampled and judged alongside the golden answers."""

import json

import duckdb

from .conftest import materialize_night


def test_production_traces_are_judged_with_source_production(library, tmp_path):
    digest = json.loads((library / "2026-10-01" / "manifest.json").read_text())["corpus_digest"]

    def trace(answer, refused=False, corpus_digest=digest, **fields):
        return {
            "question": "fridge form?",
            "retrieved": [{"passage_id": "STORE-FRIDGE-001@v1#s1", "score": 4.0, "rank": 1}],
            "context_ids": ["STORE-FRIDGE-001@v1#s1"],
            "answer": answer,
            "cited_ids": ["STORE-FRIDGE-001@v1#s1"],
            "refused": refused,
            "system_version": "ward-assistant 2.3.1",
            "corpus_digest": corpus_digest,
            **fields,
        }

    store = tmp_path / "production.jsonl"
    traces = [
        trace(
            "The specimen fridge temperature is checked twice daily and recorded on form STR-04. "
            "[STORE-FRIDGE-001@v1#s1]"
        ),
        trace("Fridge readings go on form STR-99 in green ink. [STORE-FRIDGE-001@v1#s1]"),
        trace("", refused=True, refusal_reason="evidence_check:below_threshold"),
    ]
    store.write_text("".join(json.dumps(t) + "\n" for t in traces), encoding="utf-8")
    path = tmp_path / "rag_eval.duckdb"
    assert materialize_night(library, path, trace_store=str(store)).success
    with duckdb.connect(str(path), read_only=True) as connection:
        production = connection.sql(
            "SELECT item_id, verdict, passage_id, citation_supported FROM judge_verdicts "
            "WHERE source = 'production' ORDER BY item_id"
        ).fetchall()
        golden = connection.sql(
            "SELECT count(*) FROM judge_verdicts WHERE source = 'golden'"
        ).fetchall()[0][0]
    # The refused trace is not sampled (one on an unknown corpus state is refused, naming its
    # line: test_bad_input.py).
    assert production == [
        ("production.jsonl:1", "ENTAILED", "STORE-FRIDGE-001@v1#s1", True),
        ("production.jsonl:2", "UNSUPPORTED", None, False),
    ]
    assert golden > 0
