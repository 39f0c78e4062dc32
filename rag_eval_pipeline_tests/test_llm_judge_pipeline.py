"""The nightly graph with the LLM judge resource, over real HTTP to the fake endpoint."""

import duckdb
import pytest

from rag_eval_pipeline.defs.resources import LLMJudgeResource
from rag_eval_pipeline.testing.fake_openai import FakeOpenAI

from .conftest import materialize_night

KEY_ENV = "RAG_EVAL_TEST_JUDGE_KEY"
API_KEY = "sk-pipeline-test-secret"


def test_judge_sample_uses_the_llm_judge_and_replays_from_cache(library, tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_ENV, API_KEY)
    warehouse = tmp_path / "w.duckdb"
    with FakeOpenAI(API_KEY) as fake:
        judge = LLMJudgeResource(
            base_url=fake.base_url,
            model="fake-judge",
            api_key_env=KEY_ENV,
            cache_path=str(tmp_path / "judge_cache.sqlite"),
        )
        result = materialize_night(library, warehouse, judge=judge)
        assert result.success
        first_requests = fake.request_count
        assert first_requests > 0
        with duckdb.connect(str(warehouse), read_only=True) as connection:
            verdicts = connection.sql(
                "SELECT item_id, verdict, passage_id, judge_id, replayed FROM judge_verdicts "
                "ORDER BY item_id, claim_index"
            ).fetchall()
        assert verdicts and all(v[3] == "llm:fake-judge@" + v[3].split("@")[1] for v in verdicts)
        assert ("q1", "ENTAILED", "LAB-LABEL-001@v2#s2") in [v[:3] for v in verdicts]
        assert not any(v[4] for v in verdicts)

        fake.reset_counts()
        assert materialize_night(library, warehouse, judge=judge).success
        assert fake.request_count == 0
        with duckdb.connect(str(warehouse), read_only=True) as connection:
            replayed = connection.sql("SELECT bool_and(replayed) FROM judge_verdicts").fetchall()
        assert replayed == [(True,)]
        metadata = [
            str(event.event_specific_data.materialization.metadata)
            for event in result.all_events
            if event.is_step_materialization
        ]
        assert not any(API_KEY in text for text in metadata)


@pytest.fixture(autouse=True)
def _no_real_key(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
