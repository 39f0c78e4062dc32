"""The code location: assembles assets, checks, jobs, schedules, sensors and resources."""

import dagster as dg

from rag_eval_pipeline.defs.comparison import (
    comparison_guard,
    rebaseline,
    run_comparison,
    run_comparison_job,
)
from rag_eval_pipeline.defs.corpus_snapshot import corpus_snapshot
from rag_eval_pipeline.defs.eval_summary import eval_summary
from rag_eval_pipeline.defs.generation_run import generation_run
from rag_eval_pipeline.defs.golden_set import golden_set
from rag_eval_pipeline.defs.judge_sample import judge_sample
from rag_eval_pipeline.defs.metric_tables import (
    generation_metrics,
    judge_calibration,
    retrieval_metrics,
)
from rag_eval_pipeline.defs.resources import (
    DeterministicJudgeResource,
    EvalSettings,
    LLMJudgeResource,
    ReferenceSystemResource,
    ReplaySystemResource,
    WarehouseResource,
)
from rag_eval_pipeline.defs.retrieval_run import retrieval_run
from rag_eval_pipeline.defs.schedules import nightly_eval, nightly_eval_schedule

ASSETS = [
    corpus_snapshot,
    golden_set,
    retrieval_run,
    generation_run,
    judge_sample,
    retrieval_metrics,
    generation_metrics,
    judge_calibration,
    eval_summary,
]
COMPARISON_ASSETS = [run_comparison]


def default_resources() -> dict:
    """The offline defaults (bundled inputs, the reference system, the deterministic judge),
    with the real integrations chosen by environment:

    - ``RAG_EVAL_SYSTEM=replay`` with ``RAG_EVAL_TRACES=<trace file>``: replay an assistant's
      traces (docs/TRACES.md) instead of running the reference system;
    - ``RAG_EVAL_JUDGE=llm`` with ``RAG_EVAL_JUDGE_BASE_URL``, ``RAG_EVAL_JUDGE_MODEL`` and the
      key in the variable named by ``RAG_EVAL_JUDGE_KEY_ENV`` (default ``OPENAI_API_KEY``).
    """
    system = ReferenceSystemResource()
    if dg.EnvVar("RAG_EVAL_SYSTEM").get_value("reference") == "replay":
        system = ReplaySystemResource(path=dg.EnvVar("RAG_EVAL_TRACES"))
    judge = DeterministicJudgeResource()
    if dg.EnvVar("RAG_EVAL_JUDGE").get_value("deterministic") == "llm":
        judge = LLMJudgeResource(
            base_url=dg.EnvVar("RAG_EVAL_JUDGE_BASE_URL"),
            model=dg.EnvVar("RAG_EVAL_JUDGE_MODEL"),
            api_key_env=dg.EnvVar("RAG_EVAL_JUDGE_KEY_ENV").get_value("OPENAI_API_KEY"),
        )
    return {
        "settings": EvalSettings(),
        "system": system,
        "judge": judge,
        "warehouse_db": WarehouseResource(
            path=dg.EnvVar("RAG_EVAL_WAREHOUSE").get_value("warehouse/rag_eval.duckdb")
        ),
    }


defs = dg.Definitions(
    assets=[*ASSETS, *COMPARISON_ASSETS],
    jobs=[nightly_eval, rebaseline, run_comparison_job],
    schedules=[nightly_eval_schedule],
    sensors=[comparison_guard],
    resources=default_resources(),
)
