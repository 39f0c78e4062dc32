"""Resources: the warehouse, the evaluation settings, the system under test and the judge.

The system under test and the judge are chosen by configuration behind small protocols
(``lib.system.SystemUnderTest``, ``lib.judge.Judge``), so other implementations (an HTTP client
for a team's assistant, an LLM judge) plug in without touching the assets.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import duckdb
import polars as pl

from rag_eval_pipeline.lib import warehouse
from rag_eval_pipeline.lib.judge import DeterministicJudge, Judge
from rag_eval_pipeline.lib.system import ReferenceConfig, ReferenceSystem, SystemUnderTest

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def project_path(path: str) -> Path:
    """A configured path, relative paths taken from the project root."""
    candidate = Path(path)
    return candidate if candidate.is_absolute() else PROJECT_ROOT / candidate


class WarehouseResource(dg.ConfigurableResource):
    """The DuckDB warehouse file that analysts and auditors open."""

    path: str = "warehouse/rag_eval.duckdb"

    @contextmanager
    def connect(self, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        with warehouse.connect(project_path(self.path), read_only=read_only) as connection:
            yield connection


class EvalSettings(dg.ConfigurableResource):
    """What to evaluate and how: inputs, cut-offs, sample sizes, seeds."""

    corpus_root: str = "corpus_snapshots"
    snapshot: str = "auto"
    golden_set: str = "golden_sets/procedures.jsonl"
    retrieval_depth: int = 20
    context_k: int = 5
    cutoffs: list[int] = [1, 3, 5, 10]
    rel_level: int = 2
    judge_sample_size: int = 100
    seed: int = 20261001
    bootstrap_resamples: int = 1000
    human_labels: str = "golden_sets/procedures.human_labels.jsonl"
    trace_store: str = ""


class ReferenceSystemResource(dg.ConfigurableResource):
    """The built-in reference system: BM25 over current passages with its guardrails."""

    k1: float = 1.5
    b: float = 0.75
    current_only: bool = True
    evidence_threshold: float = ReferenceConfig.evidence_threshold
    max_answer_sentences: int = 2

    def settings(self) -> ReferenceConfig:
        return ReferenceConfig(
            k1=self.k1,
            b=self.b,
            current_only=self.current_only,
            evidence_threshold=self.evidence_threshold,
            max_answer_sentences=self.max_answer_sentences,
        )

    def config(self) -> dict:
        return {"system_id": ReferenceSystem.system_id, **self.settings().__dict__}

    def build(self, passages: pl.DataFrame) -> SystemUnderTest:
        return ReferenceSystem(passages, self.settings())


class DeterministicJudgeResource(dg.ConfigurableResource):
    """The offline judge: lexical, exact and reproducible."""

    entail_coverage: float = 0.8
    contradict_coverage: float = 0.6

    def build(self) -> Judge:
        return DeterministicJudge(self.entail_coverage, self.contradict_coverage)

    def config(self) -> dict:
        return self.build().config()


class LLMJudgeResource(dg.ConfigurableResource):
    """A judge over any OpenAI-compatible chat endpoint. The API key is read from the
    environment variable named by ``api_key_env`` when a request is made; it never enters
    configuration, logs or metadata."""

    base_url: str
    model: str
    api_key_env: str = "OPENAI_API_KEY"
    timeout: float = 60.0
    max_retries: int = 4
    concurrency: int = 8
    cache_path: str = "warehouse/judge_cache.sqlite"

    def build(self) -> Judge:
        from rag_eval_pipeline.lib.llm_judge import LLMJudge

        return LLMJudge(
            base_url=self.base_url,
            model=self.model,
            api_key_env=self.api_key_env,
            timeout=self.timeout,
            max_retries=self.max_retries,
            concurrency=self.concurrency,
            cache_path=str(project_path(self.cache_path)) if self.cache_path else None,
        )

    def config(self) -> dict:
        from rag_eval_pipeline.lib.llm_judge import PROMPT_VERSION

        return {
            "judge_id": f"llm:{self.model}@{PROMPT_VERSION}",
            "base_url": self.base_url,
            "model": self.model,
            "prompt_version": PROMPT_VERSION,
        }


class ReplaySystemResource(dg.ConfigurableResource):
    """Replay of a trace file (JSONL or Parquet, ``docs/TRACES.md``) as the system under test.

    Its configuration carries the trace file's SHA-256 digest, so replaying two different
    trace files gives two different evaluation runs."""

    path: str

    def config(self) -> dict:
        from rag_eval_pipeline.lib.system import ReplaySystem

        return ReplaySystem.config_of(project_path(self.path))

    def build(self, passages: pl.DataFrame) -> SystemUnderTest:
        from rag_eval_pipeline.lib.system import ReplaySystem

        return ReplaySystem(project_path(self.path), passages)
