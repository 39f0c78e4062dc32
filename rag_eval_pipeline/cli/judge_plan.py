"""``rag-eval judge-plan``: what judging a night would take, before any judge call is made.

``rag-eval judge-plan [--suite S] [--partition DATE] [--config RUN.yaml] [--price-per-1k P]
[--json]`` takes the run settings, the system and the judge the night would use (deployment and
run configuration, as ``rag-eval nightly``), draws the same seeded sample and prints the claim
splits, verdicts, citation verdicts, repeats and diagnostic verdicts it would ask, how many the
judge's cache already answers, the estimated tokens and, with a price
(``RAG_EVAL_JUDGE_PRICE_PER_1K_TOKENS``, ``--price-per-1k`` or the judge resource's
``price_per_1k_tokens``), the cost, and where a configured budget would stop it
(``lib.judges.plan``). The judge is never asked anything.

Tonight's answers come from the run store when the night's ``generation_run`` already ran;
otherwise an in-process system (the reference system, a replay) answers now. A live system is
not called by this command: materialize ``generation_run`` for the night first.
"""

import argparse
import datetime as dt
import json
import os
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

from rag_eval_pipeline.cli import project
from rag_eval_pipeline.cli.nightly import preflight, read_run_config
from rag_eval_pipeline.lib.errors import ConfigError
from rag_eval_pipeline.lib.inputs.suites import DEFAULT_SUITE, check_suite_name

if TYPE_CHECKING:
    import polars as pl

    from rag_eval_pipeline.lib.judges.budget import JudgeBudget

PRICE_ENV = "RAG_EVAL_JUDGE_PRICE_PER_1K_TOKENS"


def configured_resources(deployment, run_config: dict) -> dict:
    """The night's resources: the deployment's, with the run configuration's ``config`` of each
    resource applied (validated as the job would)."""
    from rag_eval_pipeline.defs import build_resources

    resources = build_resources(deployment)
    for name, entry in (run_config.get("resources") or {}).items():
        if name not in resources or not isinstance(entry, dict):
            continue
        config = entry.get("config") or {}
        resource = resources[name]
        fields = {field: getattr(resource, field) for field in type(resource).model_fields}
        try:
            resources[name] = type(resource)(**{**fields, **config})
        except Exception as error:  # pydantic: a wrong type or an unknown field
            message = " ".join(str(error).split())
            raise ConfigError(f"resources.{name}.config: {message}") from None
    return resources


def price_per_1k(args: argparse.Namespace, configured_budget: "JudgeBudget") -> float | None:
    """The price: ``--price-per-1k``, else the environment, else the judge resource's."""
    if args.price_per_1k is not None:
        return args.price_per_1k
    configured = os.environ.get(PRICE_ENV)
    if configured:
        try:
            return float(configured)
        except ValueError:
            raise ConfigError(f"{PRICE_ENV}={configured!r} is not a number") from None
    return configured_budget.price_per_1k_tokens


def tonight_answers(record, resources, passages, items, store) -> tuple["pl.DataFrame", str]:
    """``generation_results`` of the night, and where they came from."""
    from rag_eval_pipeline.defs.resources import HttpSystemResource
    from rag_eval_pipeline.lib.systems.run import generation_results, retrieval_results

    run_dir = store.run_dir(record.eval_run_id)
    if store.has_table(run_dir, "generation_results"):
        return store.read_table(run_dir, "generation_results"), "the run store (generation_run)"
    system = resources["system"]
    if isinstance(system, HttpSystemResource):
        raise ConfigError(
            f"judge-plan does not call the live system at {system.base_url}: materialize "
            f"generation_run for {record.night} (suite {record.suite}) first, then plan again"
        )
    the_system = system.build(passages, None)
    ordered = items.sort("line")
    retrieved = retrieval_results(the_system, ordered, passages, record.settings.retrieval_depth)
    answers = generation_results(the_system, ordered, retrieved, record.settings.context_k)
    return answers, f"answered now by {record.system_id} (no judge involved)"


def command_judge_plan(args: argparse.Namespace) -> int:
    import polars as pl

    from rag_eval_pipeline.lib.inputs.corpus import (
        choose_snapshot,
        find_snapshot,
        load_snapshot,
        snapshot_tables,
    )
    from rag_eval_pipeline.lib.inputs.golden import golden_tables, load_golden_set
    from rag_eval_pipeline.lib.inputs.traces import load_traces
    from rag_eval_pipeline.lib.judges.budget import JudgeBudget
    from rag_eval_pipeline.lib.judges.diagnostics import diagnostic_items, judged_traces
    from rag_eval_pipeline.lib.judges.plan import format_plan, plan_json, plan_judging
    from rag_eval_pipeline.lib.judges.protocol import PaidJudge
    from rag_eval_pipeline.lib.judges.run import (
        answered_golden,
        judge_candidates,
        passage_texts,
        sample_for_judging,
    )
    from rag_eval_pipeline.lib.runs.record import EvalRunRecord
    from rag_eval_pipeline.lib.runs.registry import utc_now

    suite_name = check_suite_name(args.suite, "--suite")
    deployment = project.deployment()
    run_config = read_run_config(args.config)
    preflight(run_config, suite_name, args.config)
    night = args.partition or dt.datetime.now(ZoneInfo(deployment.timezone)).date().isoformat()
    resources = configured_resources(deployment, run_config)
    suite = resources["suites"].suite(suite_name)
    settings = resources["settings"].run_settings(suite)
    snapshot = load_snapshot(
        choose_snapshot(suite.corpus_root, dt.date.fromisoformat(night), suite.snapshot)
    )
    passages = snapshot_tables(snapshot, loaded_at=utc_now())["corpus_passages"]
    golden = load_golden_set(suite.golden_set)
    tables = golden_tables(golden)
    items = tables["golden_items"]
    judge_resource = resources["judge"]
    record = EvalRunRecord(
        suite=suite_name,
        night=night,
        snapshot_id=snapshot.snapshot_id,
        corpus_digest=snapshot.corpus_digest,
        golden_set=golden.name,
        golden_digest=golden.golden_digest,
        system_config=resources["system"].config(),
        judge_config=judge_resource.config(),
        settings=settings,
    )
    store = resources["warehouse_db"].run_store()
    generation, answered_by = tonight_answers(record, resources, passages, items, store)
    production = load_traces(suite.trace_store) if suite.trace_store else None
    states = {snapshot.corpus_digest: passages}
    if production is not None:
        for digest in sorted(set(production["corpus_digest"]) - set(states)):
            folder = find_snapshot(suite.corpus_root, digest)
            if folder is not None:
                states[digest] = snapshot_tables(load_snapshot(folder), utc_now())[
                    "corpus_passages"
                ]
    candidates, unknown = judge_candidates(
        answered_golden(generation, items, snapshot.corpus_digest), production, set(states)
    )
    sample = sample_for_judging(candidates, settings.judge_sample_size, settings.seed)
    texts = passage_texts(pl.concat(list(states.values()), how="vertical_relaxed"))
    diagnosed = diagnostic_items(
        judged_traces(
            sample.select("source", "item_id"), generation, production, record.corpus_digest
        ),
        items,
        texts,
    )
    budget = judge_resource.budget()
    budget = JudgeBudget(budget.max_tokens, budget.max_cost, price_per_1k(args, budget))
    judge = judge_resource.build()
    try:
        plan = plan_judging(
            judge,
            sample,
            texts,
            repeats=settings.judge_repeats,
            diagnosed=diagnosed,
            budget=budget,
        )
    finally:
        if isinstance(judge, PaidJudge):
            judge.close()
    production_sampled = int((sample["source"] == "production").sum())
    if args.json:
        print(json.dumps({"eval_run_id": record.eval_run_id, **plan_json(plan)}, indent=2))
        return 0
    print(f"Judge plan for suite {suite_name}, night {night} (evaluation run {record.eval_run_id})")
    print(
        format_plan(
            plan,
            [
                ("judge", record.judge_id),
                (
                    "sample",
                    f"{sample.height} answered traces ({sample.height - production_sampled} "
                    f"golden, {production_sampled} production) of {candidates.height} "
                    f"candidates; judge_repeats {settings.judge_repeats}"
                    + (f"; {unknown} production traces without their corpus" if unknown else ""),
                ),
                ("answers", answered_by),
                ("diagnostics", f"{len(diagnosed)} traces of answerable items with references"),
            ],
        )
    )
    return 0


def add_commands(commands) -> None:
    plan = commands.add_parser(
        "judge-plan", help="what judging a night would take (calls, tokens, cost), before a run"
    )
    plan.add_argument(
        "--suite",
        default=DEFAULT_SUITE,
        help=f"suite to plan the night of; default {DEFAULT_SUITE}",
    )
    plan.add_argument("--partition", type=project.night, help="night (YYYY-MM-DD); default today")
    plan.add_argument("--config", help="run configuration YAML, as for rag-eval nightly")
    plan.add_argument(
        "--price-per-1k",
        type=float,
        help=f"price per 1,000 tokens (default ${PRICE_ENV}, else the judge's price_per_1k_tokens)",
    )
    plan.add_argument("--json", action="store_true", help="the plan as JSON")
    plan.set_defaults(handler=command_judge_plan)
