"""Baselines: which run each suite is compared against, and the recorded decisions.

A baseline is accepted explicitly and recorded in ``baseline_decisions`` (the only writer is this
module): the first completed run of a suite (``first_run``), a re-baseline run made after a corpus
change (``rebaseline``, with who asked and why), or a decision by hand (``decision``). The current
baseline of a suite is its latest decision. Only complete runs can be accepted, and accepting the
current baseline again records nothing.
"""

from dataclasses import dataclass

import duckdb
import polars as pl

from rag_eval_pipeline.lib.errors import ConfigError
from rag_eval_pipeline.lib.metrics.comparison import COMPARED_METRICS, compare_items
from rag_eval_pipeline.lib.runs import registry
from rag_eval_pipeline.lib.runs.record import comparability, differences
from rag_eval_pipeline.lib.store.sql import load_sql, sql_query
from rag_eval_pipeline.lib.store.warehouse import read_frame, replace_rows

DECISION_KINDS = ("first_run", "rebaseline", "decision")


def current_baseline(connection: duckdb.DuckDBPyConnection, suite: str) -> dict | None:
    """The ``eval_runs`` row of the suite's current baseline, or ``None`` before the first."""
    decisions = read_frame(connection, sql_query("baselines", "current"), {"suite": suite})
    if not decisions.height:
        return None
    return registry.run_row(connection, decisions["eval_run_id"][0])


def newest_night(connection: duckdb.DuckDBPyConnection, suite: str) -> dict | None:
    """The ``eval_runs`` row of the suite's latest completed run of its latest night, or ``None``
    before the first: what the nights after it are measured on (the same or a newer corpus
    snapshot), so a baseline that does not compare with it (``record.comparability``) will not
    compare with them either."""
    rows = read_frame(connection, sql_query("history", "newest_night"), {"suite": suite})
    return rows.to_dicts()[0] if rows.height else None


def accept_baseline(
    connection: duckdb.DuckDBPyConnection,
    eval_run_id: str,
    *,
    kind: str,
    reason: str,
    requested_by: str | None = None,
) -> dict | None:
    """Record a complete run as its suite's baseline and return the decision; ``None``, with
    nothing recorded, when the run is the suite's current baseline already."""
    if kind not in DECISION_KINDS:
        raise ValueError(f"baseline decision kind {kind!r} is not one of {DECISION_KINDS}")
    if not reason.strip():
        raise ConfigError("a baseline decision needs a reason")
    run = registry.run_row(connection, eval_run_id)
    if run is None:
        raise ConfigError(f"no evaluation run {eval_run_id!r} in the warehouse")
    if not run["complete"]:
        raise ConfigError(
            f"evaluation run {eval_run_id} is {run['status']}, not complete: an incomplete run "
            "never becomes a baseline"
        )
    previous = current_baseline(connection, run["suite"])
    if previous is not None and previous["eval_run_id"] == eval_run_id:
        return None
    decision = {
        "suite": run["suite"],
        "golden_set": run["golden_set"],
        "eval_run_id": eval_run_id,
        "decided_at": registry.utc_now(),
        "kind": kind,
        "previous": previous["eval_run_id"] if previous else None,
        "requested_by": requested_by,
        "reason": reason,
    }
    connection.execute(sql_query("baselines", "record_decision"), decision)
    return decision


def item_values(connection: duckdb.DuckDBPyConnection, eval_run_id: str) -> pl.DataFrame:
    """Per-item values of a run for paired comparison: ``item_id, metric, value``."""
    return read_frame(connection, load_sql("comparison_item_values"), {"eval_run_id": eval_run_id})


def compare_runs(
    connection: duckdb.DuckDBPyConnection,
    candidate_run_id: str,
    baseline_run_id: str,
    *,
    seed: int = 20261001,
    resamples: int = 2000,
) -> pl.DataFrame:
    """Paired comparison of two runs, metric by metric (see ``metrics.comparison``); the
    judge-based metrics only when both runs were judged by the same judge configuration
    (``judge_note`` says when they were not)."""
    same_judge = not judge_note(
        registry.run_row(connection, candidate_run_id) or {},
        registry.run_row(connection, baseline_run_id) or {},
    )
    return compare_items(
        item_values(connection, candidate_run_id),
        item_values(connection, baseline_run_id),
        [spec for spec in COMPARED_METRICS if same_judge or not spec.judge_based],
        seed=seed,
        resamples=resamples,
    )


def judge_note(candidate: dict, baseline: dict) -> str:
    """Empty when two runs were judged by the same judge configuration; else what says the
    judge-based metrics were not compared, naming both judges."""
    if candidate.get("judge_config_digest") == baseline.get("judge_config_digest"):
        return ""
    names = [
        f"{run.get('judge_id')} ({str(run.get('judge_config_digest'))[:12]})"
        for run in (candidate, baseline)
    ]
    judged = ", ".join(spec.metric for spec in COMPARED_METRICS if spec.judge_based)
    return f"{judged} not compared: judged by {names[0]}, the other run by {names[1]}"


def comparability_noting_judges(
    candidate: dict, baseline: dict, *, other: str = "baseline"
) -> tuple[bool, str]:
    """``record.comparability``, its reason for two comparable runs ending with the
    ``judge_note`` when they were judged by different judge configurations."""
    comparable, reason = comparability(candidate, baseline, other=other)
    if comparable and (note := judge_note(candidate, baseline)):
        reason = f"{reason}; {note}"
    return comparable, reason


@dataclass(frozen=True)
class Settled:
    """What the summary step decided about a completed run's baseline."""

    baseline: dict | None
    is_baseline: bool
    # As ``run_baselines.comparable`` records it: None for the suite's baseline itself (nothing
    # to compare), False for a re-baseline run (another snapshot than the old baseline's).
    comparable: bool | None
    reason: str
    offset_rows: int = 0


def baseline_eligibility(headline: dict, max_judge_error_share: float) -> tuple[bool, str]:
    """Whether a completed run may become a baseline: not when its judge failed on more than
    ``max_judge_error_share`` of the claims (its judge-based figures are not measurements)."""
    rates = {row["metric"]: row["value"] for row in headline.get("generation", [])}
    share = rates.get("judge_error_rate")
    if share is not None and share > max_judge_error_share:
        return False, (
            f"the judge failed on {share:.1%} of the claims (more than "
            f"{max_judge_error_share:.0%}): not eligible as a baseline"
        )
    return True, ""


def settle_baseline(
    connection: duckdb.DuckDBPyConnection,
    run: dict,
    *,
    seed: int = 20261001,
    eligible: tuple[bool, str] = (True, ""),
) -> Settled:
    """Decide a just-completed run's baseline and record it.

    - a re-baseline run (made for ``rebaseline_for``) is compared with the suite's old baseline
      (the same system configuration on the old snapshot): the paired deltas are the offset the
      corpus change caused, stored in ``rebaseline_offsets``; the run then becomes the baseline;
    - the first completed run of a suite becomes its baseline;
    - a re-run of the current baseline stays the baseline;
    - any other run records the current baseline it is measured against, and whether they compare;
    - a run that is not ``eligible`` never becomes a baseline (it is still measured against the
      current one).
    """
    current = current_baseline(connection, run["suite"])
    run_id = run["eval_run_id"]
    may_be_baseline, why_not = eligible
    if not may_be_baseline and (current is None or run["rebaseline_for"]):
        registry.set_baseline_for(
            connection, run_id, current["eval_run_id"] if current else None, False, why_not
        )
        return Settled(current, False, False, f"{run_id}: {why_not}")
    if run["rebaseline_for"]:
        if current is None or current["eval_run_id"] == run_id:
            raise ConfigError(f"re-baseline run {run_id} has no earlier baseline")
        offsets = compare_runs(connection, run_id, current["eval_run_id"], seed=seed).select(
            pl.lit(run_id).alias("rebaseline_run_id"),
            pl.lit(current["eval_run_id"]).alias("old_baseline_run_id"),
            "metric",
            pl.col("baseline_value").alias("old_value"),
            pl.col("candidate_value").alias("new_value"),
            pl.col("delta").alias("offset_value"),
            "ci_low",
            "ci_high",
            pl.lit(run["rebaseline_requested_by"], dtype=pl.String).alias("requested_by"),
            pl.lit(run["rebaseline_reason"] or "").alias("reason"),
        )
        replace_rows(connection, "rebaseline_offsets", offsets, {"rebaseline_run_id": run_id})
        changed = differences(run, current) or ["the same corpus, golden set and definitions"]
        reason = f"re-baseline of {current['eval_run_id']}: " + "; ".join(changed)
        registry.set_baseline_for(connection, run_id, current["eval_run_id"], False, reason)
        accept_baseline(
            connection,
            run_id,
            kind="rebaseline",
            reason=f"re-baseline for {run['rebaseline_for']}: {run['rebaseline_reason'] or ''}",
            requested_by=run["rebaseline_requested_by"],
        )
        return Settled(current, True, False, reason, offsets.height)
    if current is None:
        accept_baseline(connection, run_id, kind="first_run", reason="first completed run")
        reason = f"{run_id} is the first completed run of suite {run['suite']}: its baseline"
        registry.set_baseline_for(connection, run_id, None, None, reason)
        return Settled(None, True, None, reason)
    if current["eval_run_id"] == run_id:
        reason = f"{run_id} is the baseline of suite {run['suite']}"
        return Settled(current, True, None, reason)
    comparable, reason = comparability(run, current)
    if not comparable and (former := former_comparable_baseline(connection, run, current)):
        reason += (
            f". Run {former['eval_run_id']} (night {former['partition_date']}), a former "
            "baseline of this suite, shares its corpus, golden set and measure definitions: "
            f"rag-eval compare {run_id} {former['eval_run_id']}"
        )
    registry.set_baseline_for(connection, run_id, current["eval_run_id"], comparable, reason)
    return Settled(current, False, comparable, reason)


def former_comparable_baseline(
    connection: duckdb.DuckDBPyConnection, run: dict, current: dict
) -> dict | None:
    """The newest earlier baseline of the run's suite that compares with it (a back-filled
    night on an older snapshot), as its ``eval_runs`` row; ``None`` when there is none."""
    formers = read_frame(
        connection,
        sql_query("baselines", "former_baselines"),
        {"suite": run["suite"], "current": current["eval_run_id"]},
    )
    for eval_run_id in formers["eval_run_id"]:
        former = registry.run_row(connection, eval_run_id)
        if former is not None and former["complete"] and comparability(run, former)[0]:
            return former
    return None
