"""Resources: suites, run settings, the warehouse and run store, the system under test, the judge.

The system under test and the judge are abstract resources with real and replay implementations
(``SystemResource``: the reference system, a trace replay; ``JudgeResource``: the deterministic
judge, an LLM judge), chosen by configuration, so another implementation plugs in without touching
the assets.
"""

from abc import ABC, abstractmethod
from pathlib import Path

import dagster as dg
import polars as pl

from rag_eval_pipeline.lib.inputs.suites import Suite, load_suite
from rag_eval_pipeline.lib.inputs.traces import trace_file_digest
from rag_eval_pipeline.lib.judges.deterministic import DeterministicJudge
from rag_eval_pipeline.lib.judges.protocol import Judge
from rag_eval_pipeline.lib.paths import project_path
from rag_eval_pipeline.lib.runs.record import RunSettings
from rag_eval_pipeline.lib.store.run_store import RunStore
from rag_eval_pipeline.lib.store.warehouse import Warehouse
from rag_eval_pipeline.lib.systems.protocol import SystemUnderTest
from rag_eval_pipeline.lib.systems.reference import ReferenceConfig, ReferenceSystem


class SuiteRegistryResource(dg.ConfigurableResource):
    """The folder of suite files (``lib.inputs.suites``); the partition's suite is read from it."""

    path: str = "suites"

    def suite(self, name: str) -> Suite:
        return load_suite(self.path, name)


class EvalSettings(dg.ConfigurableResource):
    """How a run is measured: depth, context size, cut-offs, relevance level, samples, seeds.

    Every field can change a figure, so every field is part of the run's identity
    (``RunSettings``); values that would silently change figures are refused before anything runs.
    """

    retrieval_depth: int = 20
    context_k: int = 5
    cutoffs: list[int] = [1, 3, 5, 10]
    rel_level: int = 2
    judge_sample_size: int = 100
    seed: int = 20261001
    bootstrap_resamples: int = 1000

    def run_settings(self, suite: Suite) -> RunSettings:
        """The checked settings, with the digests of the suite's labels and production traces."""

        def digest(path: Path | None) -> str:
            return trace_file_digest(path) if path is not None and path.is_file() else ""

        return RunSettings(
            retrieval_depth=self.retrieval_depth,
            context_k=self.context_k,
            cutoffs=tuple(self.cutoffs),
            rel_level=self.rel_level,
            judge_sample_size=self.judge_sample_size,
            seed=self.seed,
            bootstrap_resamples=self.bootstrap_resamples,
            human_labels_digest=digest(suite.human_labels),
            trace_store_digest=digest(suite.trace_store),
        )


class WarehouseResource(dg.ConfigurableResource):
    """The published DuckDB warehouse and the run store the steps write before it.

    ``store`` is a path or an fsspec URL; empty means ``<warehouse folder>/store``.
    """

    path: str = "warehouse/rag_eval.duckdb"
    store: str = ""

    def warehouse(self) -> Warehouse:
        return Warehouse(project_path(self.path))

    def run_store(self) -> RunStore:
        if self.store and "://" in self.store:
            return RunStore(self.store)
        return RunStore(project_path(self.store) if self.store else self.folder / "store")

    @property
    def folder(self) -> Path:
        return project_path(self.path).parent

    def report_path(self, eval_run_id: str) -> Path:
        """Where a run's HTML report is written: ``<warehouse folder>/reports/<run>.html``."""
        return self.folder / "reports" / f"{eval_run_id}.html"


class SystemResource(dg.ConfigurableResource, ABC):
    """The system under test as a resource: its identifying configuration, and the system."""

    @abstractmethod
    def config(self) -> dict:
        """What decides the system's answers (``system_id`` included); its digest is part of
        the run's identity."""

    @abstractmethod
    def build(self, passages: pl.DataFrame) -> SystemUnderTest:
        """The system, over the snapshot's passages."""


class ReferenceSystemResource(SystemResource):
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
        return {"system_id": ReferenceSystem.system_id, **self.settings().identity()}

    def build(self, passages: pl.DataFrame) -> SystemUnderTest:
        return ReferenceSystem(passages, self.settings())


class ReplaySystemResource(SystemResource):
    """Replay of a trace file (JSONL or Parquet, ``docs/TRACES.md``) as the system under test.

    Its configuration carries the trace file's SHA-256 digest, so replaying two different trace
    files gives two different evaluation runs."""

    path: str

    def config(self) -> dict:
        from rag_eval_pipeline.lib.systems.replay import ReplaySystem

        return ReplaySystem.config_of(project_path(self.path))

    def build(self, passages: pl.DataFrame) -> SystemUnderTest:
        from rag_eval_pipeline.lib.systems.replay import ReplaySystem

        return ReplaySystem(project_path(self.path), passages)


class JudgeResource(dg.ConfigurableResource, ABC):
    """The judge as a resource: its identifying configuration, and the judge."""

    @abstractmethod
    def config(self) -> dict:
        """What decides the verdicts (``judge_id`` included, and the prompt digest of an LLM
        judge); its digest is part of the run's identity."""

    @abstractmethod
    def build(self) -> Judge:
        """The judge."""


class DeterministicJudgeResource(JudgeResource):
    """The offline judge: lexical, exact and reproducible."""

    entail_coverage: float = 0.8
    contradict_coverage: float = 0.6

    def build(self) -> Judge:
        return DeterministicJudge(self.entail_coverage, self.contradict_coverage)

    def config(self) -> dict:
        return self.build().config()


class LLMJudgeResource(JudgeResource):
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
        from rag_eval_pipeline.lib.judges.llm import LLMJudge

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
        from rag_eval_pipeline.lib.judges.llm import PROMPT_DIGEST, PROMPT_VERSION

        return {
            "judge_id": f"llm:{self.model}@{PROMPT_VERSION}",
            "base_url": self.base_url.rstrip("/"),
            "model": self.model,
            "prompt_version": PROMPT_VERSION,
            "prompt_digest": PROMPT_DIGEST,
            "temperature": 0,
            "json_mode": True,
        }
