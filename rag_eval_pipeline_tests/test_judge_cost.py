"""What judging costs: repeats as distinct LLM calls, the budget that stops a run, and
``rag-eval judge-plan`` against counts and token estimates worked out by hand on the fixture."""

import json
import math
import sqlite3
from pathlib import Path

import duckdb
import pytest

from rag_eval_pipeline.cli import main
from rag_eval_pipeline.defs.resources import LLMJudgeResource
from rag_eval_pipeline.lib.inputs.corpus import load_snapshot
from rag_eval_pipeline.lib.judges.llm import (
    CLAIMS_PROMPT,
    VERDICT_PROMPT,
    LLMJudge,
    canonical_json,
)
from rag_eval_pipeline.lib.reporting.summary import format_summary, headline_from_tables
from rag_eval_pipeline.testing.fake_openai import FakeOpenAI

from .conftest import fixture_suites, materialize_night

KEY_ENV = "RAG_EVAL_TEST_JUDGE_KEY"
API_KEY = "sk-cost-test-secret"

# The fixture night: the reference system answers q1, q2 and q3 with one cited sentence each.
ANSWERS = {
    "q1": (
        "Label every blood tube at the bedside within 15 minutes of collection.",
        ["LAB-LABEL-001@v2#s2", "LAB-LABEL-001@v2#s1"],
        "LAB-LABEL-001@v2#s2",
        "within 15 minutes of collection",
    ),
    "q2": (
        "The specimen fridge temperature is checked twice daily and recorded on form STR-04.",
        ["STORE-FRIDGE-001@v1#s1", "STORE-FRIDGE-001@v1#s2", "CLEAN-LOG-001@v1#s2"],
        "STORE-FRIDGE-001@v1#s1",
        "form STR-04",
    ),
    "q3": (
        "Each clean is signed on the cleaning log CL-2, which the ward keeps for 12 months.",
        ["CLEAN-LOG-001@v1#s2", "CLEAN-LOG-001@v1#s1", "LAB-LABEL-001@v2#s1"],
        "CLEAN-LOG-001@v1#s2",
        "12 months",
    ),
}


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, API_KEY)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("RAG_EVAL_JUDGE_PRICE_PER_1K_TOKENS", raising=False)


def rows(path: Path, query: str) -> list[tuple]:
    with duckdb.connect(str(path), read_only=True) as connection:
        return connection.sql(query).fetchall()


def tokens(system_prompt: str, payload: dict, reply: int) -> int:
    """The documented estimate: (prompt text + payload characters) / 4, rounded up, + reply."""
    return math.ceil((len(system_prompt) + len(canonical_json(payload))) / 4) + reply


def split_tokens(answer: str) -> int:
    return tokens(CLAIMS_PROMPT, {"answer": answer}, math.ceil(len(answer) / 4) + 16)


def verdict_tokens(claim: str, context: list[tuple[str, str]]) -> int:
    payload = {"claim": claim, "context": [{"passage_id": p, "text": t} for p, t in context]}
    return tokens(VERDICT_PROMPT, payload, 30)


def passage_texts(library: Path) -> dict[str, str]:
    passages = load_snapshot(library / "2026-10-01").passages
    return dict(zip(passages["passage_id"], passages["text"], strict=True))


# --- repeats are distinct calls -------------------------------------------------------------


def test_repeats_are_distinct_cache_entries_and_temperature_is_part_of_the_key(tmp_path):
    pairs = [
        ("Tubes are labelled", [("P@v1#s1", "Tubes are labelled at the bedside.")]),
        ("Tubes are frozen", [("P@v1#s1", "Tubes are labelled at the bedside.")]),
    ]
    cache = tmp_path / "cache.sqlite"
    with FakeOpenAI(API_KEY) as fake:
        warm = LLMJudge(
            fake.base_url, "judge", api_key_env=KEY_ENV, cache_path=cache, temperature=0.7
        )
        first = warm.verdicts(pairs)
        assert fake.request_count == 2 and not any(v.replayed for v in first)
        second = warm.repeat_verdicts(pairs, 2)
        assert fake.request_count == 4 and not any(v.replayed for v in second)
        again = warm.repeat_verdicts(pairs, 2)
        assert fake.request_count == 4 and all(v.replayed for v in again)
        assert all(v.replayed for v in warm.verdicts(pairs))
        assert {body["temperature"] for body in fake.bodies} == {0.7}
        assert warm.config()["temperature"] == 0.7
        warm.close()
        cold = LLMJudge(fake.base_url, "judge", api_key_env=KEY_ENV, cache_path=cache)
        assert not any(v.replayed for v in cold.verdicts(pairs))
        assert fake.request_count == 6
        assert cold.config()["temperature"] == 0
        cold.close()
    with sqlite3.connect(cache) as connection:
        [(count,)] = connection.execute(
            "SELECT count(*) FROM judge_cache WHERE kind = 'verdict'"
        ).fetchall()
    assert count == 6


def test_pipeline_repeats_call_the_llm_again_and_replay_on_a_rerun(library, tmp_path):
    warehouse = tmp_path / "w.duckdb"
    with FakeOpenAI(API_KEY) as fake:
        judge = LLMJudgeResource(
            base_url=fake.base_url,
            model="fake-judge",
            api_key_env=KEY_ENV,
            cache_path=str(tmp_path / "cache.sqlite"),
        )
        assert materialize_night(library, warehouse, judge=judge, judge_repeats=2).success
        repeats = rows(
            warehouse,
            'SELECT "repeat", count(*), bool_or(replayed) FROM judge_repeat_verdicts '
            "GROUP BY 1 ORDER BY 1",
        )
        assert repeats == [(1, 3, False), (2, 3, False)]
        # 3 splits, 3 + 3 verdicts and citation verdicts, 3 repeats, 3 reference splits and 19
        # of the 22 diagnostic verdicts: each claim against the one passage it cites is the
        # citation verdict again, replayed from the cache.
        assert fake.request_count == 3 + 6 + 3 + 3 + 19
        fake.reset_counts()
        assert materialize_night(library, warehouse, judge=judge, judge_repeats=2).success
        assert fake.request_count == 0
        assert rows(warehouse, "SELECT bool_and(replayed) FROM judge_repeat_verdicts") == [(True,)]


# --- the budget -----------------------------------------------------------------------------


def test_a_budget_stops_judging_and_keeps_what_was_judged(library, tmp_path):
    texts = passage_texts(library)
    q1_claim, q1_context, *_ = ANSWERS["q1"]
    splits = sum(split_tokens(f"{claim} [{cited}]") for claim, _, cited, _ in ANSWERS.values())
    first_verdict = verdict_tokens(q1_claim, [(p, texts[p]) for p in q1_context])
    warehouse = tmp_path / "w.duckdb"
    with FakeOpenAI(API_KEY) as fake:
        judge = LLMJudgeResource(
            base_url=fake.base_url,
            model="fake-judge",
            api_key_env=KEY_ENV,
            cache_path="",
            concurrency=1,
            budget_tokens=splits + first_verdict,
        )
        assert materialize_night(library, warehouse, judge=judge).success
        # The three splits and q1's verdict fit; q2's verdict would not: nothing more is sent.
        assert fake.request_count == 4
    assert rows(
        warehouse,
        "SELECT item_id, verdict, citation_supported FROM judge_verdicts ORDER BY item_id",
    ) == [("q1", "ENTAILED", None), ("q2", "JUDGE_ERROR", None), ("q3", "JUDGE_ERROR", None)]
    usage = {
        step: (requests, used, exhausted, not_sent, reason)
        for step, requests, used, exhausted, not_sent, reason in rows(
            warehouse,
            "SELECT step, requests, tokens, budget_exhausted, not_sent, reason FROM judge_usage",
        )
    }
    requests, used, exhausted, not_sent, reason = usage["judge_sample"]
    assert (requests, used, exhausted, not_sent) == (4, splits + first_verdict, True, 5)
    assert reason.startswith("budget exhausted:") and f"{splits + first_verdict:,} tokens" in reason
    assert usage["claim_diagnostics"][0] == 0 and usage["claim_diagnostics"][2] is True
    assert rows(
        warehouse,
        "SELECT value FROM diagnostic_metrics WHERE metric = 'items_with_judge_errors'",
    ) == [(3.0,)]
    with duckdb.connect(str(warehouse), read_only=True) as connection:
        [(run_id,)] = connection.sql("SELECT eval_run_id FROM eval_runs").fetchall()
        text = format_summary(headline_from_tables(connection, run_id))
    assert "BUDGET STOPPED     judge_sample: budget exhausted:" in text
    assert "5 requests not sent, their claims are JUDGE_ERROR" in text


# --- judge-plan -----------------------------------------------------------------------------


def plan(library: Path, tmp_path: Path, monkeypatch, capsys, *extra: str) -> dict:
    registry = fixture_suites(library)
    config = tmp_path / "run.yaml"
    if not config.exists():
        config.write_text(
            "resources:\n  system:\n    config: {evidence_threshold: 1.0}\n", encoding="utf-8"
        )
    monkeypatch.setenv("RAG_EVAL_SUITES", str(registry))
    monkeypatch.setenv("RAG_EVAL_WAREHOUSE", str(tmp_path / "w.duckdb"))
    capsys.readouterr()
    status = main(
        [
            "judge-plan",
            "--suite",
            "golden",
            "--partition",
            "2026-10-15",
            "--config",
            str(config),
            "--json",
            *extra,
        ]
    )
    assert status == 0
    return json.loads(capsys.readouterr().out)


def lines(report: dict) -> dict[str, dict]:
    return {line["what"].split(" (")[0]: line for line in report["lines"]}


def test_judge_plan_counts_for_the_deterministic_judge(library, tmp_path, monkeypatch, capsys):
    config = tmp_path / "run.yaml"
    config.write_text(
        "resources:\n  system:\n    config: {evidence_threshold: 1.0}\n"
        "  settings:\n    config: {judge_repeats: 3}\n",
        encoding="utf-8",
    )
    report = plan(library, tmp_path, monkeypatch, capsys)
    found = {name: line["questions"] for name, line in lines(report).items()}
    # 3 answered items, one cited claim each: 3 splits; 3 verdicts against the context and 3
    # against the cited passage; repeats 2 and 3 of the 3 context verdicts; 3 reference answers;
    # diagnostics (A + R)(1 + P) = 2·3 (q1, two passages) + 2·4 + 2·4 = 22.
    assert found == {
        "claim splits of the answers": 3,
        "verdicts against the context, with citation verdicts": 6,
        "repeat verdicts": 6,
        "claim splits of the reference answers": 3,
        "diagnostic verdicts": 22,
    }
    assert (report["requests"], report["tokens"], report["calls_a_model"]) == (0, 0, False)


def test_judge_plan_estimates_tokens_and_cost_and_sees_the_cache(
    library, tmp_path, monkeypatch, capsys
):
    texts = passage_texts(library)
    expected_splits = sum(
        split_tokens(f"{claim} [{cited}]") for claim, _, cited, _ in ANSWERS.values()
    )
    expected_verdicts = sum(
        verdict_tokens(claim, [(p, texts[p]) for p in context])
        + verdict_tokens(claim, [(cited, texts[cited])])
        for claim, context, cited, _ in ANSWERS.values()
    )
    cache = tmp_path / "cache.sqlite"
    with FakeOpenAI(API_KEY) as fake:
        monkeypatch.setenv("RAG_EVAL_JUDGE", "llm")
        monkeypatch.setenv("RAG_EVAL_JUDGE_BASE_URL", fake.base_url)
        monkeypatch.setenv("RAG_EVAL_JUDGE_MODEL", "fake-judge")
        monkeypatch.setenv("RAG_EVAL_JUDGE_KEY_ENV", KEY_ENV)
        monkeypatch.setenv("RAG_EVAL_JUDGE_PRICE_PER_1K_TOKENS", "0.5")
        config = tmp_path / "run.yaml"
        config.write_text(
            "resources:\n  system:\n    config: {evidence_threshold: 1.0}\n"
            f"  judge:\n    config: {{cache_path: '{cache}', budget_tokens: {expected_splits}}}\n",
            encoding="utf-8",
        )
        report = plan(library, tmp_path, monkeypatch, capsys)
        assert fake.request_count == 0  # planning asks the judge nothing
        found = lines(report)
        assert found["diagnostic verdicts"]["requests"] == 19
        assert found["claim splits of the answers"]["tokens"] == expected_splits
        assert found["claim splits of the answers"]["requests"] == 3
        verdicts = found["verdicts against the context, with citation verdicts"]
        assert (verdicts["requests"], verdicts["tokens"]) == (6, expected_verdicts)
        assert report["cost"] == pytest.approx(report["tokens"] / 1000 * 0.5)
        assert (
            "budget stops judging in judge_sample (verdicts against the context"
            in (report["budget_stop"])
        )
        assert "after about 3 of" in report["budget_stop"]

        judge = LLMJudgeResource(
            base_url=fake.base_url,
            model="fake-judge",
            api_key_env=KEY_ENV,
            cache_path=str(cache),
        )
        assert materialize_night(library, tmp_path / "run.duckdb", judge=judge).success
        fake.reset_counts()
        cached = lines(plan(library, tmp_path, monkeypatch, capsys, "--price-per-1k", "2"))
        assert fake.request_count == 0
        for line in cached.values():
            assert (line["cached"], line["requests"], line["tokens"]) == (line["questions"], 0, 0)


def test_judge_plan_prints_a_table(library, tmp_path, monkeypatch, capsys):
    registry = fixture_suites(library)
    config = tmp_path / "run.yaml"
    config.write_text(
        "resources:\n  system:\n    config: {evidence_threshold: 1.0}\n", encoding="utf-8"
    )
    monkeypatch.setenv("RAG_EVAL_SUITES", str(registry))
    monkeypatch.setenv("RAG_EVAL_WAREHOUSE", str(tmp_path / "w.duckdb"))
    capsys.readouterr()
    assert (
        main(
            [
                "judge-plan",
                "--suite",
                "golden",
                "--partition",
                "2026-10-15",
                "--config",
                str(config),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert out.startswith(
        "Judge plan for suite golden, night 2026-10-15 (evaluation run 2026-10-15-"
    )
    assert "3 answered traces (3 golden, 0 production) of 3 candidates; judge_repeats 1" in out
    assert "judges locally: no model requests, no tokens, nothing to pay" in out
