"""Resources: suites, run settings, the warehouse and run store, the system under test, the judge,
and the IO manager for steps that share no disk.

The system under test and the judge are abstract resources with real and replay implementations
(``SystemResource``: the reference system, a trace replay, a live service over HTTP;
``JudgeResource``: the deterministic judge, an LLM judge), chosen by configuration, so another
implementation plugs in without touching the assets.
"""

import pickle
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import duckdb
import polars as pl
from upath import UPath

from rag_eval_pipeline.lib.errors import ConfigError
from rag_eval_pipeline.lib.inputs.suites import Suite, load_suite
from rag_eval_pipeline.lib.inputs.traces import trace_file_digest
from rag_eval_pipeline.lib.judges.deterministic import DeterministicJudge
from rag_eval_pipeline.lib.judges.protocol import Judge
from rag_eval_pipeline.lib.paths import project_path
from rag_eval_pipeline.lib.runs.lifecycle import abandon_run, publishing
from rag_eval_pipeline.lib.runs.record import RunSettings
from rag_eval_pipeline.lib.runs.shards import check_shards
from rag_eval_pipeline.lib.store.run_store import RunStore
from rag_eval_pipeline.lib.store.warehouse import Warehouse, location_problem
from rag_eval_pipeline.lib.systems.calls import DEFAULT_MAX_ERROR_SHARE
from rag_eval_pipeline.lib.systems.protocol import SystemUnderTest
from rag_eval_pipeline.lib.systems.reference import ReferenceConfig, ReferenceSystem


class SuiteRegistryResource(dg.ConfigurableResource):
    """The folder of suite files (``lib.inputs.suites``); the partition's suite is read from it."""

    path: str = "suites"

    def suite(self, name: str) -> Suite:
        return load_suite(self.path, name)


class EvalSettings(dg.ConfigurableResource):
    """How a run is measured: depth, context size, cut-offs, relevance level, samples, seeds,
    and how many times the judge judges each sampled claim (``judge_repeats``, for stability).

    Every field can change a figure, so every field is part of the run's identity
    (``RunSettings``); values that would silently change figures are refused before anything runs.
    """

    retrieval_depth: int = 20
    context_k: int = 5
    cutoffs: list[int] = [1, 3, 5, 10]
    rel_level: int = 2
    # Every answered trace of the bundled suite (about 240 golden answers and 261 production
    # traces), so every human label is matched; lower it for a paid judge (rag-eval judge-plan).
    judge_sample_size: int = 600
    judge_repeats: int = 1
    seed: int = 20261001
    bootstrap_resamples: int = 1000

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        """Refuse bad settings when the run starts, before any step writes anything."""
        self.run_settings(None)

    def run_settings(self, suite: Suite | None) -> RunSettings:
        """The checked settings, with the digests of the suite's labels and production traces."""

        def digest(path: Path | None) -> str:
            return trace_file_digest(path) if path is not None and path.is_file() else ""

        return RunSettings(
            retrieval_depth=self.retrieval_depth,
            context_k=self.context_k,
            cutoffs=tuple(self.cutoffs),
            rel_level=self.rel_level,
            judge_sample_size=self.judge_sample_size,
            judge_repeats=self.judge_repeats,
            seed=self.seed,
            bootstrap_resamples=self.bootstrap_resamples,
            human_labels_digest=digest(suite.human_labels) if suite else "",
            trace_store_digest=digest(suite.trace_store) if suite else "",
        )


class WarehouseResource(dg.ConfigurableResource):
    """The published DuckDB warehouse and the run store the steps write before it.

    ``store`` is a path or an fsspec URL; empty means ``<warehouse folder>/store``.
    """

    path: str = "warehouse/rag_eval.duckdb"
    store: str = ""

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        """Refuse a path where no warehouse can be (a folder, a file that is no DuckDB
        database, a path under a file) when the step starts, not when the night publishes: the
        daemon's and the UI's runs too, which the command line's check does not see."""
        path = project_path(self.path)
        problem = location_problem(path)
        if problem:
            raise ConfigError(f"warehouse {path}: {problem}")

    def warehouse(self) -> Warehouse:
        return Warehouse(project_path(self.path))

    def run_store(self) -> RunStore:
        if self.store and "://" in self.store:
            return RunStore(self.store)
        return RunStore(project_path(self.store) if self.store else self.folder / "store")

    @property
    def folder(self) -> Path:
        return project_path(self.path).parent

    @contextmanager
    def publishing(
        self,
        before_publish: Callable[[], None] | None = None,
        after_publish: Callable[[], None] | None = None,
    ) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection to write the warehouse through (the run store's records synced first;
        ``lib.runs.lifecycle.publishing``), published when the block ends, after
        ``before_publish`` has returned; ``after_publish`` is called once it is, under the
        publish lock."""
        with publishing(
            self.warehouse(), self.run_store(), before_publish, after_publish
        ) as connection:
            yield connection

    def abandon(self, eval_run_id: str, reason: str) -> None:
        """Mark an evaluation run that ended without finishing as failed."""
        abandon_run(self.warehouse(), self.run_store(), eval_run_id, reason)

    def report_path(self, eval_run_id: str) -> Path:
        """Where a run's HTML report is written: ``<warehouse folder>/reports/<run>.html``."""
        return self.folder / "reports" / f"{eval_run_id}.html"

    def capture_path(self, eval_run_id: str, part: str | None = None) -> Path:
        """Where a live run's traces are captured: ``<warehouse folder>/traces/<run>.parquet``;
        a shard's part of them goes to ``traces/<run>/<part>.parquet`` until they are merged."""
        if part is not None:
            return self.folder / "traces" / eval_run_id / f"{part}.parquet"
        return self.folder / "traces" / f"{eval_run_id}.parquet"


class SystemResource(dg.ConfigurableResource, ABC):
    """The system under test as a resource: its identifying configuration, and the system."""

    @abstractmethod
    def config(self) -> dict:
        """What decides the system's answers (``system_id`` included); its digest is part of
        the run's identity."""

    @abstractmethod
    def build(
        self, passages: pl.DataFrame, capture: Path | None = None, cache: UPath | None = None
    ) -> SystemUnderTest:
        """The system, over the snapshot's passages. ``capture`` is the run's trace file: a live
        system writes what it did there (retrieval step) and reads its answers back from it
        (generation step, perhaps in another process); the in-process systems ignore it.
        ``cache`` is a folder where a system may keep what it derives from the passages alone
        (the reference system's BM25 index) for the next run over the same passages."""

    def max_system_error_share(self) -> float:
        """The share of items that may end in a system error before the run fails."""
        return DEFAULT_MAX_ERROR_SHARE

    def check_inputs(self, corpus_digest: str, golden_items: pl.DataFrame, source: str) -> None:
        """Refuse, before the run begins, input of the system's own that does not fit the night
        (a replayed trace file): ``corpus_digest`` is the snapshot's, ``golden_items`` the golden
        set's items (``source`` its file). Nothing to check for a system that is asked live."""


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

    def build(
        self, passages: pl.DataFrame, capture: Path | None = None, cache: UPath | None = None
    ) -> SystemUnderTest:
        return ReferenceSystem(passages, self.settings(), index_cache=cache)


class ReplaySystemResource(SystemResource):
    """Replay of a trace file (JSONL or Parquet, ``docs/TRACES.md``) as the system under test.

    Its configuration carries the trace file's SHA-256 digest, so replaying two different trace
    files gives two different evaluation runs. Every trace must be recorded on the snapshot
    being evaluated unless ``allow_corpus_mismatch`` (to replay the capture of a live run that
    was allowed to serve another corpus state; recorded in the configuration, as it was there),
    and every trace naming an ``item_id`` must answer that golden item's question."""

    path: str
    allow_corpus_mismatch: bool = False

    def config(self) -> dict:
        from rag_eval_pipeline.lib.systems.replay import ReplaySystem

        config = ReplaySystem.config_of(project_path(self.path))
        if self.allow_corpus_mismatch:
            config["allow_corpus_mismatch"] = True
        return config

    def check_inputs(self, corpus_digest: str, golden_items: pl.DataFrame, source: str) -> None:
        from rag_eval_pipeline.lib.systems.replay import ReplaySystem

        replay = ReplaySystem(project_path(self.path))
        if not self.allow_corpus_mismatch:
            replay.check_corpus(corpus_digest)
        replay.check_golden(golden_items, source)

    def build(
        self, passages: pl.DataFrame, capture: Path | None = None, cache: UPath | None = None
    ) -> SystemUnderTest:
        from rag_eval_pipeline.lib.systems.capture import RecordedReplaySystem

        return RecordedReplaySystem(
            project_path(self.path), passages, allow_corpus_mismatch=self.allow_corpus_mismatch
        )


class HttpSystemResource(SystemResource):
    """The team's live assistant over HTTP (``docs/SYSTEM_API.md``, ``lib.systems.http``).

    Its identity is the base URL and the ``system_version`` its ``/health`` reports (and an
    allowed corpus mismatch); concurrency, timeouts, retries, the deadline and the error bound
    only decide how it is called. ``api_key_env`` is the NAME of the variable holding a bearer
    token (empty: none); the key never enters configuration, logs or metadata."""

    base_url: str
    api_key_env: str = ""
    concurrency: int = 8
    timeout_s: float = 30.0
    max_retries: int = 4
    deadline_s: float = 3600.0
    max_error_share: float = DEFAULT_MAX_ERROR_SHARE
    allow_corpus_mismatch: bool = False

    def client_settings(self):
        """How the client calls the service (``lib.systems.http.ClientSettings``)."""
        from rag_eval_pipeline.lib.systems.http import ClientSettings

        return ClientSettings(
            concurrency=self.concurrency,
            timeout_s=self.timeout_s,
            max_retries=self.max_retries,
            deadline_s=self.deadline_s,
        )

    def config(self) -> dict:
        from rag_eval_pipeline.lib.systems.http import fetch_health, identity_config

        health = fetch_health(
            self.base_url, api_key_env=self.api_key_env or None, timeout_s=self.timeout_s
        )
        return identity_config(self.base_url, health.system_version, self.allow_corpus_mismatch)

    def build(
        self, passages: pl.DataFrame, capture: Path | None = None, cache: UPath | None = None
    ) -> SystemUnderTest:
        from rag_eval_pipeline.lib.systems.http import HttpSystem

        if capture is None:
            raise ConfigError("the HTTP system needs the run's capture path")
        return HttpSystem(
            self.base_url,
            passages,
            capture=capture,
            api_key_env=self.api_key_env or None,
            settings=self.client_settings(),
            allow_corpus_mismatch=self.allow_corpus_mismatch,
        )

    def max_system_error_share(self) -> float:
        if not 0 <= self.max_error_share <= 1:
            raise ConfigError(f"max_error_share must be from 0 to 1, got {self.max_error_share}")
        return self.max_error_share


class ShardingResource(dg.ConfigurableResource):
    """How the per-item work of a run is split over steps (``lib.runs.shards``): how it is run,
    not what is measured, so it is not part of the run's identity."""

    shards: int = 1

    def count(self) -> int:
        return check_shards(self.shards)


class JudgeResource(dg.ConfigurableResource, ABC):
    """The judge as a resource: its identifying configuration, and the judge."""

    @abstractmethod
    def config(self) -> dict:
        """What decides the verdicts (``judge_id`` included, and the prompt digest of an LLM
        judge); its digest is part of the run's identity."""

    @abstractmethod
    def build(self, budget_share: float = 1.0) -> Judge:
        """The judge; ``budget_share`` is the part of a run's judge budget it may spend (a shard
        of the run gets its share)."""

    def budget(self, share: float = 1.0):
        """The run's judge budget (``share`` of it): none for a judge that makes no calls."""
        from rag_eval_pipeline.lib.judges.budget import JudgeBudget

        return JudgeBudget()


class DeterministicJudgeResource(JudgeResource):
    """The offline judge: lexical, exact and reproducible."""

    entail_coverage: float = 0.8
    contradict_coverage: float = 0.6

    def build(self, budget_share: float = 1.0) -> Judge:
        return DeterministicJudge(self.entail_coverage, self.contradict_coverage)

    def config(self) -> dict:
        return self.build().config()


class LLMJudgeResource(JudgeResource):
    """A judge over any OpenAI-compatible chat endpoint. The API key is read from the
    environment variable named by ``api_key_env`` when a request is made; it never enters
    configuration, logs or metadata.

    ``temperature`` is the sampling temperature (part of the judge's identity). ``budget_tokens``
    and ``budget_cost`` stop judging before a request would take the run past them (cost needs
    ``price_per_1k_tokens``); 0 means no limit. The budget and the price decide how far the
    judge gets, not what it says, so they are not part of the identity (``lib.judges.budget``)."""

    base_url: str
    model: str
    api_key_env: str = "OPENAI_API_KEY"
    timeout: float = 60.0
    max_retries: int = 4
    concurrency: int = 8
    cache_path: str = "warehouse/judge_cache.sqlite"
    deadline_seconds: float = 1800.0
    temperature: float = 0.0
    budget_tokens: int = 0
    budget_cost: float = 0.0
    price_per_1k_tokens: float = 0.0

    def budget(self, share: float = 1.0):
        from rag_eval_pipeline.lib.judges.budget import JudgeBudget

        return JudgeBudget(
            max_tokens=int(self.budget_tokens * share) if self.budget_tokens else None,
            max_cost=self.budget_cost * share if self.budget_cost else None,
            price_per_1k_tokens=self.price_per_1k_tokens or None,
        )

    def build(self, budget_share: float = 1.0) -> Judge:
        from rag_eval_pipeline.lib.judges.llm import LLMJudge

        return LLMJudge(
            base_url=self.base_url,
            model=self.model,
            api_key_env=self.api_key_env,
            timeout=self.timeout,
            max_retries=self.max_retries,
            concurrency=self.concurrency,
            deadline_seconds=self.deadline_seconds,
            cache_path=str(project_path(self.cache_path)) if self.cache_path else None,
            temperature=self.temperature,
            budget=self.budget(budget_share),
        )

    def config(self) -> dict:
        from rag_eval_pipeline.lib.judges.llm import PROMPT_DIGEST, PROMPT_VERSION

        return {
            "judge_id": f"llm:{self.model}@{PROMPT_VERSION}",
            "base_url": self.base_url.rstrip("/"),
            "model": self.model,
            "prompt_version": PROMPT_VERSION,
            "prompt_digest": PROMPT_DIGEST,
            # 0 stays the integer it always was, so a judge at temperature 0 keeps its digest.
            "temperature": self.temperature or 0,
            "json_mode": True,
        }


class _PickledUPathIOManager(dg.UPathIOManager):
    extension = ".pickle"
    # Local paths: written to a temporary name and renamed over. An object store's PUT is
    # atomic already, and fsspec's move there is a copy that globs its path, which a step key's
    # brackets (``retrieve_shard[shard_0001]``) break: the object is written at its name.
    LOCAL_PROTOCOLS = ("", "file", "local")

    def dump_to_path(self, context, obj, path) -> None:
        data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        if path.protocol not in self.LOCAL_PROTOCOLS:
            path.write_bytes(data)
            return
        temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        temporary.write_bytes(data)
        temporary.replace(path)

    def load_from_path(self, context, path):
        return pickle.loads(path.read_bytes())


class RunStoreIOManager(dg.ConfigurableIOManagerFactory):
    """The steps' hand-offs (small run handles, never the data: that is in the run store's
    Parquet) kept at ``base``, a path or an fsspec URL (``s3://bucket/rag-eval/io``), for
    deployments whose steps share no disk: on Kubernetes each step is a pod, and Dagster's
    default IO manager would keep a step's output in that pod's own ``DAGSTER_HOME/storage``.
    Asset outputs go under ``<base>/<asset>/<partition>``, op outputs under
    ``<base>/<run id>/<step>/<output>``, as Dagster's own file IO manager lays them out; a local
    one is written to a temporary name and renamed over, an object store's in one PUT."""

    base: str

    def create_io_manager(self, context) -> dg.UPathIOManager:
        from upath import UPath

        base = UPath(self.base) if "://" in self.base else UPath(project_path(self.base))
        return _PickledUPathIOManager(base_path=base)
