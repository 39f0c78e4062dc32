"""The deployment: what the environment chooses, read once, when the definitions are built.

| variable | chooses | default |
|---|---|---|
| ``RAG_EVAL_TIMEZONE`` | time zone of the nights and of the 02:00 schedule | ``UTC`` |
| ``RAG_EVAL_EXECUTOR`` | executor of the evaluation jobs (``in_process``, ``multiprocess``, ``celery`` with ``RAG_EVAL_CELERY_BROKER`` and ``RAG_EVAL_CELERY_BACKEND``, ``k8s``) | ``in_process`` |
| ``RAG_EVAL_WAREHOUSE_QUEUE`` | with ``celery``: the queue of the one step of ``nightly_eval`` that writes the warehouse (``eval_summary``) and of ``release_checks``, which reads it, so they run on the worker beside the warehouse file (``docs/SCALING.md``) | the default queue |
| ``RAG_EVAL_FIRST_NIGHT`` | the first night there is (``YYYY-MM-DD``): earlier nights cannot be run or backfilled | ``2026-10-01`` |
| ``RAG_EVAL_SHARDS`` | shards the per-item work is split into (``docs/SCALING.md``) | ``1`` |
| ``RAG_EVAL_SYSTEM`` | system under test (``reference``; ``replay`` with ``RAG_EVAL_TRACES``; ``http`` with ``RAG_EVAL_SYSTEM_URL`` and, for a bearer token, ``RAG_EVAL_SYSTEM_KEY_ENV`` naming its variable) | ``reference`` |
| ``RAG_EVAL_JUDGE`` | judge (``deterministic``; ``llm`` with ``RAG_EVAL_JUDGE_BASE_URL``, ``RAG_EVAL_JUDGE_MODEL``, ``RAG_EVAL_JUDGE_KEY_ENV``) | ``deterministic`` |
| ``RAG_EVAL_WAREHOUSE`` | the published warehouse file | ``warehouse/rag_eval.duckdb`` |
| ``RAG_EVAL_RUN_STORE`` | the run store (path or fsspec URL) | ``<warehouse folder>/store`` |
| ``RAG_EVAL_IO_STORE`` | where the steps' hand-offs are kept (path or fsspec URL) when the steps share no disk, as on Kubernetes (``docs/SCALING.md``) | Dagster's ``DAGSTER_HOME/storage`` |
| ``RAG_EVAL_SUITES`` | the folder of suite files | ``suites`` |
| ``RAG_EVAL_GATES`` | the release gates file | ``gates/release_gates.yaml`` |

The in-process executor is the default: on a two-core machine the multiprocess executor costs
1.5-2 s of process start-up per step, more than most steps take.
"""

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from rag_eval_pipeline.lib.errors import ConfigError
from rag_eval_pipeline.lib.paths import packaged_path, project_path

# dagster-celery sends a step to the queue its op tag names (``dagster_celery.tags``).
CELERY_QUEUE_TAG = "dagster-celery/queue"
EXECUTORS = ("in_process", "multiprocess", "celery", "k8s")
SYSTEMS = ("reference", "replay", "http")
JUDGES = ("deterministic", "llm")
DEFAULT_GATES = "gates/release_gates.yaml"


# The first night of the partitions unless RAG_EVAL_FIRST_NIGHT says otherwise.
FIRST_NIGHT = "2026-10-01"


@dataclass(frozen=True)
class Deployment:
    """The choices of one deployment (module docstring)."""

    timezone: str = "UTC"
    first_night: str = FIRST_NIGHT
    executor: str = "in_process"
    system: str = "reference"
    traces: str = ""
    system_url: str = ""
    system_key_env: str = ""
    judge: str = "deterministic"
    judge_base_url: str = ""
    judge_model: str = ""
    judge_key_env: str = "OPENAI_API_KEY"
    warehouse: str = "warehouse/rag_eval.duckdb"
    run_store: str = ""
    io_store: str = ""
    suites: str = "suites"
    gates: str = ""
    shards: int = 1
    celery_broker: str = ""
    celery_backend: str = ""
    warehouse_queue: str = ""

    @property
    def warehouse_writer_tags(self) -> dict[str, str]:
        """Op tags of the step that writes the warehouse: its Celery queue, when one is set."""
        return {CELERY_QUEUE_TAG: self.warehouse_queue} if self.warehouse_queue else {}

    @classmethod
    def from_environment(cls, environment: Mapping[str, str]) -> "Deployment":
        """The deployment the variables choose; a bad value names the variable."""

        def choice(variable: str, allowed: tuple[str, ...], default: str) -> str:
            value = environment.get(variable) or default
            if value not in allowed:
                raise ConfigError(f"{variable}={value!r}; expected one of {', '.join(allowed)}")
            return value

        def required(variable: str, because: str) -> str:
            value = environment.get(variable, "")
            if not value:
                raise ConfigError(f"{variable} must be set when {because}")
            return value

        timezone = environment.get("RAG_EVAL_TIMEZONE") or "UTC"
        try:
            ZoneInfo(timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ConfigError(f"RAG_EVAL_TIMEZONE={timezone!r} is not a time zone") from None
        first_night = environment.get("RAG_EVAL_FIRST_NIGHT") or FIRST_NIGHT
        try:
            if dt.date.fromisoformat(first_night).isoformat() != first_night:
                raise ValueError
        except ValueError:
            raise ConfigError(
                f"RAG_EVAL_FIRST_NIGHT={first_night!r} is not a date (YYYY-MM-DD)"
            ) from None
        system = choice("RAG_EVAL_SYSTEM", SYSTEMS, "reference")
        executor = choice("RAG_EVAL_EXECUTOR", EXECUTORS, "in_process")
        shards = environment.get("RAG_EVAL_SHARDS") or "1"
        if not shards.isdigit() or not 1 <= int(shards) <= 4096:
            raise ConfigError(f"RAG_EVAL_SHARDS={shards!r}; expected a whole number from 1 to 4096")
        judge = choice("RAG_EVAL_JUDGE", JUDGES, "deterministic")
        queue = environment.get("RAG_EVAL_WAREHOUSE_QUEUE") or ""
        if queue and executor != "celery":
            raise ConfigError(
                f"RAG_EVAL_WAREHOUSE_QUEUE={queue!r} names a Celery queue; it needs "
                f"RAG_EVAL_EXECUTOR=celery, not {executor}"
            )
        return cls(
            timezone=timezone,
            first_night=first_night,
            executor=executor,
            shards=int(shards),
            celery_broker=required("RAG_EVAL_CELERY_BROKER", "RAG_EVAL_EXECUTOR=celery")
            if executor == "celery"
            else "",
            celery_backend=environment.get("RAG_EVAL_CELERY_BACKEND") or "",
            warehouse_queue=queue,
            system=system,
            traces=required("RAG_EVAL_TRACES", "RAG_EVAL_SYSTEM=replay")
            if system == "replay"
            else "",
            system_url=required("RAG_EVAL_SYSTEM_URL", "RAG_EVAL_SYSTEM=http")
            if system == "http"
            else "",
            system_key_env=environment.get("RAG_EVAL_SYSTEM_KEY_ENV") or "",
            judge=judge,
            judge_base_url=required("RAG_EVAL_JUDGE_BASE_URL", "RAG_EVAL_JUDGE=llm")
            if judge == "llm"
            else "",
            judge_model=required("RAG_EVAL_JUDGE_MODEL", "RAG_EVAL_JUDGE=llm")
            if judge == "llm"
            else "",
            judge_key_env=environment.get("RAG_EVAL_JUDGE_KEY_ENV") or "OPENAI_API_KEY",
            warehouse=environment.get("RAG_EVAL_WAREHOUSE") or "warehouse/rag_eval.duckdb",
            run_store=store_location(environment, "RAG_EVAL_RUN_STORE"),
            io_store=store_location(environment, "RAG_EVAL_IO_STORE"),
            suites=environment.get("RAG_EVAL_SUITES") or "suites",
            gates=environment.get("RAG_EVAL_GATES") or "",
        )

    @property
    def gates_file(self) -> Path:
        """The gates file: the configured one, else the project's, else the packaged default."""
        if self.gates:
            return project_path(self.gates)
        in_project = project_path(DEFAULT_GATES)
        return in_project if in_project.is_file() else packaged_path(DEFAULT_GATES)


def store_location(environment: Mapping[str, str], variable: str) -> str:
    """A store's path or fsspec URL from ``variable``; a URL whose protocol has no fsspec driver
    here (``s3://`` without ``s3fs``) is refused now, naming the variable, rather than at the
    night's first write."""
    value = environment.get(variable) or ""
    if "://" in value:
        import fsspec

        protocol = value.split("://", 1)[0]
        try:
            fsspec.get_filesystem_class(protocol)
        except (ImportError, ValueError) as error:
            raise ConfigError(
                f"{variable}={value!r}: no fsspec driver for {protocol!r} here ({error})"
            ) from None
    return value
