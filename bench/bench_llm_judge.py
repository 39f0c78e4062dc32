"""Benchmark: the LLM judge's throughput under bounded concurrency, and its cache.

Judges 1,000 claims against the fake OpenAI-compatible server answering each request after
100 ms, at concurrency 16. The ideal wall time is 1000 / 16 x 0.1 s = 6.25 s; the goal is within
1.3x of it. A second run with a new judge on the same cache must make no HTTP request.

Run: ``.venv/bin/python bench/bench_llm_judge.py``; exits 1 when a goal is missed.
"""

import os
import sys
import tempfile
import time
from pathlib import Path

from rag_eval_pipeline.lib.judge import ENTAILED

from rag_eval_pipeline.lib.judges.llm import LLMJudge
from rag_eval_pipeline.testing.fake_openai import FakeOpenAI

CLAIMS = 1000
CONCURRENCY = 16
LATENCY = 0.1
GOAL_RATIO = 1.3
KEY_ENV = "RAG_EVAL_BENCH_JUDGE_KEY"


def main() -> int:
    api_key = "sk-bench-local-only"
    os.environ[KEY_ENV] = api_key
    context = [
        (f"BENCH-{n:02d}@v1#s1", f"Samples of batch {n} are stored at 4 °C for {n} days.")
        for n in range(10)
    ]
    pairs = [
        (f"Samples of batch {n % 10} are stored at 4 °C for {n} days", context)
        for n in range(CLAIMS)
    ]
    ideal = CLAIMS / CONCURRENCY * LATENCY
    with tempfile.TemporaryDirectory() as folder, FakeOpenAI(api_key, latency=LATENCY) as fake:
        cache_path = Path(folder) / "judge_cache.sqlite"

        def judge() -> LLMJudge:
            return LLMJudge(
                base_url=fake.base_url,
                model="fake-judge-1",
                api_key_env=KEY_ENV,
                timeout=10.0,
                concurrency=CONCURRENCY,
                cache_path=cache_path,
            )

        with judge() as first:
            started = time.perf_counter()
            verdicts = first.verdicts(pairs)
            wall = time.perf_counter() - started
        entailed = sum(v.verdict == ENTAILED for v in verdicts)
        ratio = wall / ideal
        print(f"claims judged:       {len(verdicts)} ({entailed} ENTAILED)")
        print(f"HTTP requests:       {fake.request_count}, max in flight {fake.max_in_flight}")
        print(f"wall time:           {wall:.2f} s")
        print(f"ideal:               {ideal:.2f} s  (1000 / 16 x 0.1 s)")
        print(f"ratio to ideal:      {ratio:.3f}  (goal <= {GOAL_RATIO})")

        fake.reset_counts()
        with judge() as second:
            started = time.perf_counter()
            replayed = second.verdicts(pairs)
            cached_wall = time.perf_counter() - started
        print(
            f"cached re-run:       {cached_wall:.2f} s, HTTP requests {fake.request_count}, "
            f"replayed {sum(v.replayed for v in replayed)} of {len(replayed)}"
        )
        same = [v._replace(replayed=False) for v in replayed] == verdicts
        print(f"same verdicts:       {same}")
        ok = ratio <= GOAL_RATIO and fake.request_count == 0 and same
    print("goals met" if ok else "GOAL MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
