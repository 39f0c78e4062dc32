"""The LLM judge against a fake OpenAI-compatible server, over real HTTP on 127.0.0.1."""

import json
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rag_eval_pipeline.lib.judges.llm import (
    PROMPT_VERSION,
    LLMJudge,
    LLMJudgeError,
    MalformedReply,
    context_digest,
    parse_claims,
    parse_verdict,
)
from rag_eval_pipeline.lib.judges.protocol import (
    CONTRADICTED,
    ENTAILED,
    JUDGE_ERROR,
    UNSUPPORTED,
    Claim,
    Verdict,
)
from rag_eval_pipeline.testing.fake_openai import FakeOpenAI

API_KEY = "sk-test-9f8e7d6c5b4a-DO-NOT-LEAK"
KEY_ENV = "RAG_EVAL_TEST_JUDGE_KEY"

CONTEXT = [
    ("SPEC-RET-001@v2#s1", "Returns are accepted within 30 days of delivery."),
    (
        "SPEC-REF-002@v3#s2",
        "Refunds are paid within 14 days unless the item arrived damaged. "
        "Returns are accepted within 30 days of delivery.",
    ),
    ("SPEC-SHIP-003@v1#s4", "Express shipping costs 9.50 EUR per parcel."),
]


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(API_KEY) as server:
        yield server


@pytest.fixture
def make_judge(
    fake: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., LLMJudge]]:
    monkeypatch.setenv(KEY_ENV, API_KEY)
    judges: list[LLMJudge] = []

    def build(**overrides) -> LLMJudge:
        settings = {
            "base_url": fake.base_url,
            "model": "fake-judge-1",
            "api_key_env": KEY_ENV,
            "timeout": 5.0,
            "max_retries": 3,
            "concurrency": 4,
            "cache_path": tmp_path / "judge_cache.sqlite",
            "backoff_seconds": 0.01,
        }
        judge = LLMJudge(**(settings | overrides))
        judges.append(judge)
        return judge

    yield build
    for judge in judges:
        judge.close()


def test_verdicts_name_the_supporting_passage(fake: FakeOpenAI, make_judge) -> None:
    judge = make_judge()
    verdicts = judge.verdicts(
        [
            ("Refunds are paid within 14 days unless the item arrived damaged.", CONTEXT),
            # Both the first and the second passage state it: the fake names the first.
            ("Returns are accepted within 30 days of delivery.", CONTEXT),
            ("Express shipping costs 9.50 EUR per parcel.", CONTEXT),
            ("Standard shipping is free.", CONTEXT),
        ]
    )
    assert verdicts == [
        Verdict(ENTAILED, "SPEC-REF-002@v3#s2", replayed=False),
        Verdict(ENTAILED, "SPEC-RET-001@v2#s1", replayed=False),
        Verdict(ENTAILED, "SPEC-SHIP-003@v1#s4", replayed=False),
        Verdict(UNSUPPORTED, None, replayed=False),
    ]
    assert fake.request_count == 4
    body = fake.bodies[0]
    assert body["model"] == "fake-judge-1"
    assert body["temperature"] == 0
    assert body["response_format"] == {"type": "json_object"}
    sent = json.loads(body["messages"][-1]["content"])
    # The claim is judged against the exact context: every id and text, in order.
    assert [(p["passage_id"], p["text"]) for p in sent["context"]] == CONTEXT


def test_single_verdict_goes_through_http(fake: FakeOpenAI, make_judge) -> None:
    verdict = make_judge().verdict("Express shipping costs 9.50 EUR per parcel", CONTEXT)
    assert verdict == Verdict(ENTAILED, "SPEC-SHIP-003@v1#s4")
    assert fake.request_count == 1


def test_claims_keep_qualifiers_numbers_and_citations(fake: FakeOpenAI, make_judge) -> None:
    answer = (
        "Refunds are paid within 14 days unless the item arrived damaged. [SPEC-REF-002@v3#s2] "
        "Express shipping costs 9.50 EUR per parcel, except for orders over 200 EUR. "
        "[SPEC-SHIP-003@v1#s4] Returns are accepted only if the seal is intact."
    )
    claims = make_judge().claims(answer)
    assert claims == [
        Claim(
            "Refunds are paid within 14 days unless the item arrived damaged.",
            ("SPEC-REF-002@v3#s2",),
        ),
        Claim(
            "Express shipping costs 9.50 EUR per parcel, except for orders over 200 EUR.",
            ("SPEC-SHIP-003@v1#s4",),
        ),
        Claim("Returns are accepted only if the seal is intact.", ()),
    ]
    system_prompt = fake.bodies[0]["messages"][0]["content"]
    for qualifier in ('"unless"', '"only if"', '"except"', '"within"', "number with its unit"):
        assert qualifier in system_prompt
    assert json.loads(fake.bodies[0]["messages"][-1]["content"]) == {"answer": answer}


def test_claims_citing_ids_absent_from_the_answer_are_malformed() -> None:
    # The fake only cites what the answer marks, so the rule is checked on the parser.
    reply = json.dumps({"claims": [{"text": "Refunds take 14 days.", "cited_ids": ["X@v1#s1"]}]})
    with pytest.raises(MalformedReply, match="not in the answer"):
        parse_claims(reply, "Refunds take 14 days.")
    assert parse_claims(reply, "Refunds take 14 days. [X@v1#s1]") == [
        Claim("Refunds take 14 days.", ("X@v1#s1",))
    ]


def test_retries_after_429_honouring_retry_after(fake: FakeOpenAI, make_judge) -> None:
    fake.fail("rate_limit", times=1, retry_after="1")
    judge = make_judge(backoff_seconds=0.001)
    started = time.perf_counter()
    verdict = judge.verdict("Express shipping costs 9.50 EUR per parcel.", CONTEXT)
    elapsed = time.perf_counter() - started
    assert verdict == Verdict(ENTAILED, "SPEC-SHIP-003@v1#s4")
    assert fake.request_count == 2
    # The backoff alone would have waited about a millisecond; the server asked for 1 s.
    assert elapsed >= 0.95


def test_retries_after_429_without_retry_after(fake: FakeOpenAI, make_judge) -> None:
    fake.fail("rate_limit", times=2, retry_after=None)
    verdict = make_judge().verdict("Express shipping costs 9.50 EUR per parcel.", CONTEXT)
    assert verdict == Verdict(ENTAILED, "SPEC-SHIP-003@v1#s4")
    assert fake.request_count == 3


def test_retries_after_500_then_succeeds(fake: FakeOpenAI, make_judge) -> None:
    fake.fail("server_error", times=3)
    verdict = make_judge(max_retries=3).verdict("Standard shipping is free.", CONTEXT)
    assert verdict == Verdict(UNSUPPORTED, None)
    assert fake.request_count == 4


def test_500_beyond_the_retries_is_a_judge_error(fake: FakeOpenAI, make_judge) -> None:
    fake.fail("server_error", times=3)
    verdict = make_judge(max_retries=2).verdict(
        "Express shipping costs 9.50 EUR per parcel.", CONTEXT
    )
    assert verdict == Verdict(JUDGE_ERROR, None)
    assert fake.request_count == 3


@pytest.mark.parametrize("kind", ["not_json", "unknown_verdict", "unknown_passage"])
def test_malformed_reply_is_retried(fake: FakeOpenAI, make_judge, kind: str) -> None:
    fake.fail(kind, times=2)
    verdict = make_judge(max_retries=2).verdict(
        "Express shipping costs 9.50 EUR per parcel.", CONTEXT
    )
    assert verdict == Verdict(ENTAILED, "SPEC-SHIP-003@v1#s4")
    assert fake.request_count == 3


@pytest.mark.parametrize("kind", ["not_json", "unknown_verdict", "unknown_passage"])
def test_malformed_replies_end_as_judge_error_and_are_not_cached(
    fake: FakeOpenAI, make_judge, kind: str
) -> None:
    fake.fail(kind, times=3)
    claim = "Express shipping costs 9.50 EUR per parcel."
    verdict = make_judge(max_retries=2).verdict(claim, CONTEXT)
    assert verdict == Verdict(JUDGE_ERROR, None)
    assert verdict.verdict not in (ENTAILED, CONTRADICTED, UNSUPPORTED)
    assert fake.request_count == 3
    # Not cached: the next run asks again and now gets the real verdict.
    again = make_judge(max_retries=2).verdict(claim, CONTEXT)
    assert again == Verdict(ENTAILED, "SPEC-SHIP-003@v1#s4", replayed=False)
    assert fake.request_count == 4


def test_verdict_parser_rules() -> None:
    ids = ["A@v1#s1", "B@v1#s1"]
    assert parse_verdict('{"verdict": "contradicted", "passage_id": "B@v1#s1"}', ids) == Verdict(
        CONTRADICTED, "B@v1#s1"
    )
    assert parse_verdict('```json\n{"verdict": "UNSUPPORTED", "passage_id": null}\n```', ids) == (
        Verdict(UNSUPPORTED, None)
    )
    with pytest.raises(MalformedReply, match="not in the context"):
        parse_verdict('{"verdict": "ENTAILED", "passage_id": null}', ids)


def test_timeout_is_retried(fake: FakeOpenAI, make_judge) -> None:
    fake.fail("slow", times=1, seconds=2.0)
    judge = make_judge(timeout=0.3, max_retries=1)
    started = time.perf_counter()
    verdict = judge.verdict("Express shipping costs 9.50 EUR per parcel.", CONTEXT)
    assert verdict == Verdict(ENTAILED, "SPEC-SHIP-003@v1#s4")
    assert fake.request_count == 2
    assert time.perf_counter() - started < 1.5


def test_timeouts_beyond_the_retries_are_a_judge_error(fake: FakeOpenAI, make_judge) -> None:
    fake.fail("slow", times=2, seconds=2.0)
    verdict = make_judge(timeout=0.3, max_retries=1).verdict(
        "Express shipping costs 9.50 EUR per parcel.", CONTEXT
    )
    assert verdict == Verdict(JUDGE_ERROR, None)
    assert fake.request_count == 2


def test_api_key_never_leaks(
    fake: FakeOpenAI,
    make_judge,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    caplog.set_level(logging.DEBUG, logger="rag_eval_pipeline.lib.judges.llm")
    judge = make_judge()
    fake.fail("rate_limit", times=1, retry_after="0")
    fake.fail("not_json", times=4)
    assert judge.verdict("Express shipping costs 9.50 EUR per parcel.", CONTEXT).verdict == (
        JUDGE_ERROR
    )
    judge.verdict("Express shipping costs 9.50 EUR per parcel.", CONTEXT)
    judge.claims("Refunds are paid within 14 days. [SPEC-REF-002@v3#s2]")
    assert API_KEY not in json.dumps(judge.config())
    assert set(judge.config()) >= {"base_url", "model", "prompt_version", "judge_id"}
    assert judge.config()["prompt_version"] == PROMPT_VERSION
    assert API_KEY not in repr(judge)
    assert API_KEY not in caplog.text
    assert "retry" in caplog.text  # the retries were logged, without the key
    assert API_KEY.encode() not in (tmp_path / "judge_cache.sqlite").read_bytes()

    # A wrong key: the server echoes the key it was given in its 401 body.
    wrong_key = "sk-wrong-0123456789-ALSO-SECRET"
    monkeypatch.setenv(KEY_ENV, wrong_key)
    with pytest.raises(LLMJudgeError) as raised:
        make_judge(cache_path=None).verdict("Refunds are paid within 14 days.", CONTEXT)
    message = str(raised.value)
    assert "401" in message and KEY_ENV in message
    assert wrong_key not in message and API_KEY not in message
    with pytest.raises(LLMJudgeError) as raised:
        make_judge(cache_path=None).claims("Refunds are paid within 14 days.")
    assert wrong_key not in str(raised.value)

    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(LLMJudgeError, match=KEY_ENV):
        make_judge(cache_path=None).verdict("Refunds are paid within 14 days.", CONTEXT)


def test_failed_decomposition_raises_without_the_key(fake: FakeOpenAI, make_judge) -> None:
    fake.fail("not_json", times=2)
    with pytest.raises(
        LLMJudgeError, match=r"claim decomposition .* failed: malformed reply.*after 2 attempts"
    ) as raised:
        make_judge(max_retries=1).claims("Refunds are paid within 14 days.")
    assert fake.request_count == 2
    assert API_KEY not in str(raised.value)


def test_cache_replays_without_http(fake: FakeOpenAI, make_judge) -> None:
    answer = "Refunds are paid within 14 days unless the item arrived damaged. Shipping is free."
    pairs = [
        ("Refunds are paid within 14 days unless the item arrived damaged.", CONTEXT),
        ("Standard shipping is free.", CONTEXT),
    ]
    first_claims = make_judge().claims(answer)
    first = make_judge().verdicts(pairs)
    assert [v.replayed for v in first] == [False, False]
    asked = fake.request_count
    assert asked == 3

    second_judge = make_judge()
    assert second_judge.claims(answer) == first_claims
    second = second_judge.verdicts(pairs)
    assert fake.request_count == asked  # zero HTTP requests
    assert second == [v._replace(replayed=True) for v in first]

    # The key covers the context digest and the model: a changed passage or model asks again.
    changed = [(pid, text.replace("14", "21")) for pid, text in CONTEXT]
    assert context_digest(changed) != context_digest(CONTEXT)
    assert make_judge().verdict(pairs[0][0], changed) == Verdict(UNSUPPORTED, None)
    assert make_judge(model="fake-judge-2").verdict(*pairs[1]).replayed is False
    assert fake.request_count == asked + 2


def test_context_digest_is_canonical_and_ordered() -> None:
    assert context_digest(CONTEXT) == context_digest([list(p) for p in CONTEXT])
    assert context_digest(CONTEXT) != context_digest(list(reversed(CONTEXT)))


def test_concurrency_bound_is_respected_and_order_kept(fake: FakeOpenAI, make_judge) -> None:
    fake.latency = 0.1
    claims = [f"Express shipping costs {n}.50 EUR per parcel." for n in range(12)]
    verdicts = make_judge(concurrency=3).verdicts([(claim, CONTEXT) for claim in claims])
    assert fake.request_count == 12
    # Bounded, and actually concurrent: a serial judge would show 1 here.
    assert fake.max_in_flight == 3
    expected = [
        Verdict(ENTAILED, "SPEC-SHIP-003@v1#s4") if n == 9 else Verdict(UNSUPPORTED, None)
        for n in range(12)
    ]
    assert verdicts == expected


def test_identical_pairs_in_a_batch_are_asked_once(fake: FakeOpenAI, make_judge) -> None:
    pair = ("Express shipping costs 9.50 EUR per parcel.", CONTEXT)
    verdicts = make_judge(cache_path=None).verdicts([pair, pair, pair])
    assert verdicts == [Verdict(ENTAILED, "SPEC-SHIP-003@v1#s4")] * 3
    assert fake.request_count == 1
