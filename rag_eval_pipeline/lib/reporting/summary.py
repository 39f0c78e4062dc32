"""The evaluation run summary: headline figures read back from the warehouse, and their text.

A headline figure the run could not compute (no reference answers, so no correctness; no judged
claims, so no faithfulness) is printed "not measured", never as a number, and a run that did not
complete says so above its figures. The headline as data holds the same figures: one not
measured has ``value`` None and ``not_measured``, the reason the text gives. Each figure's ``n``
counts its ``unit`` (items, or claims for the claim rates).
"""

import json
from collections.abc import Callable, Mapping
from pathlib import Path

import duckdb

from rag_eval_pipeline.lib.errors import named_few
from rag_eval_pipeline.lib.inputs.golden import NO_ANSWER_STRATA
from rag_eval_pipeline.lib.metrics.comparison import COMPARED_METRICS, WORSE, row_verdict
from rag_eval_pipeline.lib.reporting.judge_trust import judge_trust_from_tables, judge_trust_lines
from rag_eval_pipeline.lib.runs import registry
from rag_eval_pipeline.lib.runs.baselines import current_baseline
from rag_eval_pipeline.lib.runs.comparisons import comparison_rows
from rag_eval_pipeline.lib.runs.gates import REGRESSION_GATE
from rag_eval_pipeline.lib.runs.record import UNRECORDED, measures_of
from rag_eval_pipeline.lib.store.sql import sql_query

HEADLINE_RETRIEVAL = ("Success@5", "R@5", "RR@5", "nDCG@10", "Stale@5")
HEADLINE_GENERATION = (
    "faithfulness",
    "contradicted_claim_rate",
    "unsupported_claim_rate",
    "judge_error_rate",
    "citation_validity",
    "citation_support",
    "answer_correct_rate",
    "token_f1",
    "confident_wrong_rate",
    "false_refusal_rate",
)
NO_ANSWER = ("correct_refusal_rate", "confident_wrong_rate")
WHY_NOT_MEASURED = {
    "faithfulness": "no judged claims",
    "contradicted_claim_rate": "no judged claims",
    "unsupported_claim_rate": "no judged claims",
    "judge_error_rate": "no judged claims",
    "citation_support": "no judged citations",
    "citation_validity": "no answers",
    "answer_correct_rate": "no must_mention or reference answers",
    "token_f1": "no reference answers",
    "confident_wrong_rate": "no answerable items",
    "false_refusal_rate": "no answerable items",
    **dict.fromkeys(HEADLINE_RETRIEVAL, "no answerable items with a relevant passage"),
}
NO_STRATUM_ITEMS = "no items of this stratum in the golden set"
ITEM, CLAIM = "item", "claim"
# The unit a figure's n counts (as ``judge_rate_estimates.unit``); every other figure's is items.
UNITS = dict.fromkeys(
    ("contradicted_claim_rate", "unsupported_claim_rate", "judge_error_rate", "citation_support"),
    CLAIM,
)


def _rows(connection: duckdb.DuckDBPyConnection, query: str, parameters: dict) -> list[dict]:
    return connection.sql(sql_query("summary", query), params=parameters).pl().to_dicts()


def _has_table(connection: duckdb.DuckDBPyConnection, table: str) -> bool:
    return bool(
        connection.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_name = $table",
            {"table": table},
        ).fetchall()[0][0]
    )


def system_version(run: Mapping) -> str | None:
    """The version the system under test reported (an HTTP service's ``/health``, part of its
    identifying configuration), from an ``eval_runs`` row; None for a system without one."""
    try:
        config = json.loads(run.get("system_config") or "{}")
    except ValueError:
        return None
    version = config.get("system_version") if isinstance(config, dict) else None
    return str(version) if version not in (None, "") else None


def headline_from_tables(
    connection: duckdb.DuckDBPyConnection,
    eval_run_id: str,
    *,
    with_gates: bool = True,
    identity: Mapping | None = None,
) -> dict:
    """Identity, status, digests and the headline metrics of one run, as plain data, with the
    release gates checked on it (``gates``) unless ``with_gates`` is False (the headline the run
    is completed with, before its gates are checked). ``identity``: the run's ``eval_runs`` row,
    when the caller has read it already."""
    identity = identity or registry.run_row(connection, eval_run_id)
    if identity is None:
        raise KeyError(f"no evaluation run {eval_run_id!r} in the warehouse")
    scope = {"run": eval_run_id}
    retrieval = _rows(connection, "retrieval", {**scope, "names": list(HEADLINE_RETRIEVAL)})
    generation = _rows(connection, "generation", scope)
    no_answer = [
        {**r, "unit": unit_of(r["metric"])}
        for r in generation
        if r["metric"] in NO_ANSWER
        and (
            (r["scope"] == "stratum" and r["scope_value"] != "answerable")
            or (r["scope"] == "overall" and r["scope_value"] == "no_answer")
        )
    ]
    sweep = _rows(connection, "recommended_threshold", scope)
    calibration = _rows(connection, "calibration", scope)
    # A warehouse written before runs kept their gates has no gate_results until its next
    # publish (read-only sessions do not upgrade it): then nothing is said of the gates.
    recorded = with_gates and _has_table(connection, "gate_results")
    gates = _rows(connection, "gates", scope) if recorded else None
    # The headline a run is completed with (no gates yet) is of a finished run.
    finished = not with_gates or identity["status"] == "complete"
    return {
        "eval_run_id": eval_run_id,
        "suite": identity["suite"],
        "status": identity["status"],
        "status_reason": identity["status_reason"],
        "partition_date": identity["partition_date"],
        "dagster_run_id": identity["dagster_run_id"],
        "snapshot_id": identity["snapshot_id"],
        "corpus_digest": identity["corpus_digest"],
        "golden_set": identity["golden_set"],
        "golden_digest": identity["golden_digest"],
        "system_id": identity["system_id"],
        "system_config_digest": identity["system_config_digest"],
        "system_version": system_version(identity),
        "judge_id": identity["judge_id"],
        "settings_digest": identity["settings_digest"],
        "measures_version": measures_of(identity),
        "report_path": identity["report_path"],
        **({"gates": gates} if recorded else {}),
        "retrieval": in_order(retrieval, "measure", HEADLINE_RETRIEVAL, finished),
        "generation": in_order(
            [
                {**r, "unit": unit_of(r["metric"])}
                for r in generation
                if r["scope"] == "overall" and r["scope_value"] == "answerable"
            ],
            "metric",
            HEADLINE_GENERATION,
            finished,
        ),
        "no_answer": no_answer,
        "no_answer_not_measured": strata_not_measured(no_answer, finished),
        "operations": [r for r in generation if r["scope"] == "operations"],
        "system_error_items": _rows(connection, "system_error_items", scope)
        if _has_table(connection, "system_calls")
        else [],
        "golden_drift": golden_drift(connection, identity),
        "sufficiency_correctness": _rows(connection, "sufficiency", scope),
        "recommended_threshold": sweep[0] if sweep else None,
        "judge_calibration": calibration[0] if calibration else None,
        "judge_trust": judge_trust_from_tables(connection, eval_run_id),
    }


def golden_drift(connection: duckdb.DuckDBPyConnection, identity: Mapping) -> dict | None:
    """How many of the run's golden items drifted in its snapshot (``golden_drift``), with the
    first few and why; None when the warehouse has no drift table."""
    if not _has_table(connection, "golden_drift"):
        return None
    rows = _rows(
        connection,
        "golden_drift",
        {"golden": identity["golden_digest"], "corpus": identity["corpus_digest"]},
    )
    return {
        "drifted": rows[0]["drifted"] if rows else 0,
        "first": [{"item_id": r["item_id"], "drift_reason": r["drift_reason"]} for r in rows],
    }


def drift_lines(drift: Mapping | None) -> list[str]:
    """The identity block's line on golden drift: the items whose answering passage is not
    current, or changed, in the run's snapshot are scored like the rest, so their figures moved
    with the corpus, not the system; nothing when none drifted."""
    if not drift or not drift["drifted"]:
        return []
    first = [f"{row['item_id']} ({row['drift_reason']})" for row in drift["first"]]
    more = drift["drifted"] - len(first)
    named = "; ".join(first) + (f"; and {more} more" if more > 0 else "")
    return [
        f"  golden drift      {drift['drifted']} item(s) whose answering passage is not current, "
        "or changed, in this snapshot,",
        "                    scored like the rest: their figures may have moved with the corpus, "
        "not the system;",
        f"                    re-label them (golden_drift lists every one): {named}",
    ]


UNFINISHED = "the run did not finish"


def unit_of(metric: str) -> str:
    """What a figure's ``n`` counts: ``claim`` for the claim rates, ``item`` otherwise."""
    return UNITS.get(metric, ITEM)


def counted(row: Mapping, metric: str | None = None) -> str:
    """A figure's ``n`` with its unit: ``12 claims``, ``1 item``."""
    unit = row.get("unit") or unit_of(metric or row.get("metric") or "")
    return f"{row['n']} {unit}{'' if row['n'] == 1 else 's'}"


def _figure(row: dict, key: str, finished: bool = True) -> str:
    """One figure with its interval and n with its unit; "not measured" with why when it has no
    value (``not_measured_reason``)."""
    value = row.get("value")
    if value is None:
        return f"  {row[key]:<28} {not_measured_text(row, key, finished)}"
    interval = ""
    if row.get("ci_low") is not None:
        interval = f"  95% CI {row['ci_low']:.3f} to {row['ci_high']:.3f}"
    return (
        f"  {row[key]:<28} {value:.4f}{interval}  (n={counted(row, row.get('metric', row[key]))})"
    )


def not_measured_reason(name: str, finished: bool = True) -> str | None:
    """Why the figure ``name`` has no value: for a run that did not finish, that it did not,
    whatever the golden set holds; otherwise the reason known for ``name``, if any."""
    return WHY_NOT_MEASURED.get(name) if finished else UNFINISHED


def not_measured(name: str) -> str:
    """What a figure without a value reads: "not measured", with why when that is known."""
    return _not_measured_words(not_measured_reason(name))


def _not_measured_words(why: str | None) -> str:
    return "not measured" + (f" ({why})" if why else "")


def not_measured_text(row: Mapping, key: str, finished: bool = True) -> str:
    """What a row without a value reads: its own ``not_measured`` reason when it has one (the
    headline's), else the reason for its name (``not_measured_reason``)."""
    why = row.get("not_measured") or not_measured_reason(row[key], finished)
    return _not_measured_words(why)


def in_order(
    rows: list[dict], key: str, names: tuple[str, ...], finished: bool = True
) -> list[dict]:
    """The rows of ``names`` in order, a row without a value standing in for each one missing:
    ``value`` None, ``n`` 0 and ``not_measured``, why (``not_measured_reason``)."""
    found = {row[key]: row for row in rows}
    return [
        found.get(name)
        or {
            key: name,
            "value": None,
            "ci_low": None,
            "ci_high": None,
            "n": 0,
            "not_measured": not_measured_reason(name, finished),
        }
        for name in names
    ]


def strata_not_measured(no_answer: list[dict], finished: bool = True) -> list[dict]:
    """The no-answer strata without a figure among the ``no_answer`` rows, each with why: the
    golden set has no item of it (or the run did not finish)."""
    why = NO_STRATUM_ITEMS if finished else UNFINISHED
    present = {row["scope_value"] for row in no_answer}
    return [
        {"stratum": stratum, "not_measured": why}
        for stratum in NO_ANSWER_STRATA
        if stratum not in present
    ]


def left_out_line(headline: Mapping) -> str | None:
    """The items whose call to the system under test failed, left out of every figure (with
    why); None when every call succeeded."""
    failed = [
        f"{row['item_id']} ({row['cause']})" for row in headline.get("system_error_items") or []
    ]
    return f"left out of every figure above: {named_few(failed)}" if failed else None


def operations_block(headline: Mapping) -> list[str]:
    """``operations_lines`` of the headline, the items left out of every figure named after the
    system errors."""
    operations = operations_lines(headline.get("operations") or [])
    left_out = left_out_line(headline)
    if left_out and operations:
        operations.insert(1, f"    {left_out}")
    return operations


def operations_lines(rows: list[dict]) -> list[str]:
    """The calls to the system under test: system errors with n, requests and retries, latency
    p50 / p95 / max, tokens and cost (each line only when the run has the figures)."""
    found = {row["metric"]: row for row in rows}
    lines = []
    errors, rate = found.get("system_errors"), found.get("system_error_rate")
    if errors and rate:
        lines.append(
            f"  {'system errors':<28} {errors['value']:.0f} of {errors['n']} "
            f"({rate['value']:.1%})  95% CI {rate['ci_low']:.3f} to {rate['ci_high']:.3f}"
        )
    if "requests" in found:
        retries = found.get("retries", {}).get("value") or 0
        lines.append(f"  {'requests':<28} {found['requests']['value']:.0f} ({retries:.0f} retries)")
    latency = [found.get(f"latency_{name}_ms") for name in ("p50", "p95", "max")]
    if all(latency):
        figures = " / ".join(f"{row['value']:.1f}" for row in latency)
        lines.append(f"  {'latency p50 / p95 / max':<28} {figures} ms  (n={latency[0]['n']})")
    for label, name in (
        ("prompt tokens", "prompt_tokens"),
        ("completion tokens", "completion_tokens"),
        ("cost", "cost"),
    ):
        total, mean = found.get(f"{name}_total"), found.get(f"{name}_mean")
        if total and mean:
            lines.append(
                f"  {label:<28} total {total['value']:g}, mean {mean['value']:.4g}  (n={total['n']})"
            )
    return lines


def format_summary(
    headline: dict, *, warehouse: str | None = None, report: str | None = None
) -> str:
    """The readable summary ``make nightly`` prints."""
    lines = [f"Evaluation run {headline['eval_run_id']} (night {headline['partition_date']})"]
    finished = headline.get("status") == "complete"
    if not finished:
        reason = f": {headline['status_reason']}" if headline.get("status_reason") else ""
        lines.append(
            f"  INCOMPLETE: this run is {headline.get('status')}{reason}; its figures, if any, "
            "are not a finished night"
        )
    operations = operations_block(headline)
    if operations:
        operations = ["", "Operations (calls to the system under test):", *operations]
    lines += [
        f"  suite             {headline.get('suite')}",
        f"  corpus snapshot   {headline['snapshot_id']}  digest {headline['corpus_digest']}",
        f"  golden set        {headline['golden_set']}  digest {headline['golden_digest']}",
        *drift_lines(headline.get("golden_drift")),
        f"  system            {headline['system_id']}"
        + (f"  version {headline['system_version']}" if headline.get("system_version") else "")
        + f"  config {headline['system_config_digest'][:12]}",
        f"  judge             {headline['judge_id']}",
        f"  measures          {headline.get('measures_version') or UNRECORDED}",
        "",
        "Retrieval (answerable items, relevant = grade >= 2):",
        *(
            _figure(r, "measure", finished)
            for r in in_order(headline["retrieval"], "measure", HEADLINE_RETRIEVAL, finished)
        ),
        "",
        "Generation (answerable items):",
        *(
            _figure(r, "metric", finished)
            for r in in_order(headline["generation"], "metric", HEADLINE_GENERATION, finished)
        ),
        "",
        "No-answer items (reported apart, never in the headline):",
        *(
            _figure({**r, "label": f"{r['scope_value']}: {r['metric']}"}, "label")
            for r in headline["no_answer"]
        ),
        *(
            f"  {row['stratum'] + ':':<28} {_not_measured_words(row['not_measured'])}"
            for row in strata_not_measured(headline["no_answer"], finished)
        ),
        *operations,
        "",
        "Context sufficient x answer correct (answerable items):",
        *(
            f"  sufficient={c['context_sufficient']!s:<5}  correct={c['answer_correct']!s:<5}  {c['count']}"
            for c in headline["sufficiency_correctness"]
        ),
        *(
            []
            if headline["sufficiency_correctness"]
            else ["  not measured" + ("" if finished else f" ({UNFINISHED})")]
        ),
    ]
    threshold = headline.get("recommended_threshold")
    if threshold:
        lines += ["", *sweep_lines(threshold)]
    lines += gate_lines(headline.get("gates"), finished)
    if "baseline" in headline:
        lines += baseline_lines(headline["baseline"], headline["eval_run_id"], finished)
    calibration = headline.get("judge_calibration")
    if headline.get("judge_trust"):
        lines += judge_trust_lines(headline["judge_trust"])
    elif calibration:
        lines += ["", f"Judge calibration: {calibration['reason']}"]
    where = []
    if warehouse:
        where.append(f"  warehouse  {warehouse}")
    report = report or headline.get("report_path")
    if report:
        # A night stopped between its publish and its report (killed in the summary step's last
        # second) is complete in the warehouse without the file: say so, not only where it is.
        missing = (
            ""
            if Path(report).is_file()
            else " (not written: the step that writes it ended first; run the night again to write it)"
        )
        where.append(f"  report     {report}{missing}")
    if where:
        lines += ["", "Where to look:", *where]
    return "\n".join(lines)


def gates_heading(gates: list[dict]) -> str:
    """``Release gates (<file>, version <n>): <p> passed, <f> failed, <a> not assessed`` for the
    ``gate_results`` rows of a run (at least one)."""
    passed = sum(1 for gate in gates if gate["passed"])
    failed = sum(1 for gate in gates if gate["status"] == "failed")
    return (
        f"Release gates ({gates[0]['gates_file']}, version {gates[0]['gates_version']}): "
        f"{passed} passed, {failed} failed, {len(gates) - passed - failed} not assessed"
    )


def gate_lines(gates: list[dict] | None, finished: bool = True) -> list[str]:
    """The release gates checked on the run, those not passed first (``gate_results``); a run
    with none recorded says so, and why (a run that did not finish never had them checked)."""
    if gates is None:
        return []
    if not gates:
        why = (
            "none in its gates file, or run before runs kept their gates"
            if finished
            else "not checked: " + UNFINISHED
        )
        return ["", f"Release gates: none recorded for this run ({why})"]
    lines = ["", gates_heading(gates)]
    for gate in gates:
        if not gate["passed"]:
            label = "FAILED" if gate["status"] == "failed" else "not assessed"
            lines.append(f"  {label:<13} {gate['message']}")
    return lines


def in_compared_order(rows: list[dict]) -> list[dict]:
    """Comparison rows in ``COMPARED_METRICS`` order (``rag-eval compare``'s), others after."""
    order = {spec.metric: position for position, spec in enumerate(COMPARED_METRICS)}
    return sorted(rows, key=lambda row: (order.get(row["metric"], len(order)), row["metric"]))


def baseline_from_tables(
    connection: duckdb.DuckDBPyConnection,
    eval_run_id: str,
    *,
    configured_alpha: Callable[[], float | None] = lambda: None,
    identity: Mapping | None = None,
) -> dict:
    """What the run was measured against (``run_baselines``), the suite's baseline now, and the
    run's recorded comparison (``run_comparisons``, metric by metric in ``COMPARED_METRICS``
    order), each metric with its ``verdict`` at the level the regression gate was checked at,
    as recorded with the comparison (``regression_alpha``); for a comparison recorded before
    that was kept, at ``configured_alpha()`` (the gates file's level now; None: no verdicts).
    ``regression_gate`` is ``passed``, ``failed`` or ``not assessed`` (not compared, or no
    level to judge at). ``identity``: the run's ``eval_runs`` row, when read already."""
    identity = identity or registry.run_row(connection, eval_run_id) or {}
    decision = (
        _rows(connection, "baseline_decision", {"run": eval_run_id})
        if _has_table(connection, "run_baselines")
        else []
    )
    current = current_baseline(connection, identity["suite"]) if identity else None
    compared = [
        row
        for row in in_compared_order(comparison_rows(connection, eval_run_id).to_dicts())
        if row["metric"] != "comparability"
    ]
    recorded = bool(compared) and all(row.get("regression_alpha") is not None for row in compared)
    alpha = compared[0]["regression_alpha"] if recorded else None
    if compared and not recorded:
        alpha = configured_alpha()
    for row in compared:
        row["regression_alpha"] = alpha
        row["verdict"] = row_verdict(row, alpha)
    if not compared or alpha is None:
        gate = "not assessed"
    else:
        gate = "failed" if any(row["verdict"] == WORSE for row in compared) else "passed"
    return {
        "regression_gate": gate,
        "is_current_baseline": bool(identity.get("is_current_baseline")),
        "current_baseline_run_id": current["eval_run_id"] if current else None,
        "decision": decision[0] if decision else None,
        "regression_alpha": alpha,
        "regression_alpha_recorded": recorded,
        "compared": compared,
    }


def p_value_text(p_value: float | None) -> str | None:
    """A p-value as the summary and the UI show it: four decimals, or ``<0.0001`` below what
    four decimals show (never ``0.0000``, a certainty no test gives); None when not measured."""
    if p_value is None:
        return None
    return "<0.0001" if p_value < 0.00005 else f"{p_value:.4f}"


def comparison_line(row: Mapping) -> str:
    """One compared metric: both values, the delta with its interval, the p-value and test,
    and ``worse`` or ``better`` when the row has a significant ``verdict``; a metric the two
    runs do not both measure says why. A p-value that rounds to 0 at four decimals is printed
    ``p<0.0001``: an exact McNemar p-value is never 0."""
    if row["candidate_value"] is None or row["baseline_value"] is None or row["delta"] is None:
        return f"  {row['metric']:<17} not compared: {row.get('reason') or 'not measured on both'}"
    interval = (
        f" [{row['ci_low']:+.4f}, {row['ci_high']:+.4f}]"
        if row["ci_low"] is not None and row["ci_high"] is not None
        else ""
    )
    shown = p_value_text(row["p_value"])
    if shown is None:
        p_value = "p not measured"
    else:
        p_value = f"p{shown}" if shown.startswith("<") else f"p={shown}"
    marked = f"  {row['verdict']}" if row.get("verdict") else ""
    return (
        f"  {row['metric']:<17} {row['candidate_value']:.4f} vs {row['baseline_value']:.4f}  "
        f"delta {row['delta']:+.4f}{interval}  {p_value} ({row['test']}, n={row['n']}){marked}"
    )


def baseline_lines(baseline: Mapping, eval_run_id: str, finished: bool = True) -> list[str]:
    """What the run was compared with, and the regression gate's outcome, which the release
    gates above do not include: it is checked when the run is compared with its baseline (the
    comparison guard's ``run_comparison``), so a run whose gates all passed may still have
    regressed. A baseline replaced since the run was measured against it is named beside the
    suite's baseline now."""
    decision = baseline.get("decision") or {}
    against = decision.get("baseline_run_id")
    current = baseline.get("current_baseline_run_id")
    compared = baseline.get("compared") or []
    lines = [""]
    if compared:
        against = compared[0]["baseline_run_id"]
        alpha = baseline.get("regression_alpha")
        worse = [row["metric"] for row in compared if row.get("verdict") == WORSE]
        if alpha is None:
            gate = (
                f"  gate {REGRESSION_GATE}: not shown (the level it was checked at was not "
                "recorded with this comparison, and the gates file could not be read)"
            )
        else:
            level = (
                f"p < {alpha:g}"
                if baseline.get("regression_alpha_recorded")
                else f"p < {alpha:g}, the gates file's level now: the comparison did not record "
                "its own"
            )
            outcome = (
                f"FAILED: significantly worse in {', '.join(worse)}"
                if worse
                else "passed: no compared metric significantly worse"
            )
            gate = f"  gate {REGRESSION_GATE} ({level}): {outcome}"
        lines += [f"Against baseline {against}: {compared[0]['reason']}", gate]
    else:
        if not finished:
            lines.append("Against the baseline: not compared: " + UNFINISHED)
        elif baseline.get("is_current_baseline"):
            lines.append(
                "Against the baseline: this run is its suite's baseline: nothing to compare"
            )
        elif not decision:
            lines.append(
                "Against the baseline: nothing recorded: the run was published before runs kept "
                "their baseline"
            )
        elif not against:
            lines.append(
                f"Against the baseline: no baseline to compare with ({decision['reason']})"
            )
        elif decision.get("comparable") is None:
            lines.append(
                f"Against baseline {against}: whether the two compare was not recorded "
                f"({decision['reason']})"
            )
        elif decision.get("comparable") is False:
            lines.append(f"Against baseline {against}: {decision['reason']}")
        else:
            target = current or against
            lines.append(
                f"Against baseline {against}: comparable, not compared yet (under the daemon, its "
                f"comparison_guard sensor compares the run with the suite's baseline); rag-eval "
                f"compare {eval_run_id} {target} compares the two now"
            )
        lines.append(f"  gate {REGRESSION_GATE}: not assessed")
    if against and current and current != against:
        now = "this run" if current == eval_run_id else current
        lines.append(f"  the suite's baseline is now {now}, not {against}")
    if compared:
        lines += [comparison_line(row) for row in compared]
    return lines


def summary_markdown(headline: dict) -> str:
    """The same summary as markdown for the asset page in the UI."""
    return "```\n" + format_summary(headline) + "\n```"


def sweep_lines(threshold: Mapping) -> list[str]:
    """The recommended evidence threshold (``recommended_threshold`` of ``headline_from_tables``)
    with what it can and cannot be trusted for: it was chosen on the run's own items, so its
    counts are in-sample (the Wilson upper bound of its unanswerable-answered share says how
    far they may be off); it may not have met the cap at all; without no-answer items nothing
    bounds what it lets through. A row without the item counts (a warehouse written before they
    were kept) gives the first line alone. A threshold that refuses every answerable item is no
    recommendation, and the line says why instead (``degenerate_sweep_line``)."""
    # Imported here: the summary module serves commands that never print a sweep.
    from rag_eval_pipeline.lib.metrics.generation import (
        MAX_UNANSWERABLE_ANSWERED_RATE,
        allowed_unanswerable_answered,
    )
    from rag_eval_pipeline.lib.metrics.statistics import wilson_interval

    answered, refused = threshold["unanswerable_answered"], threshold["answerable_refused"]
    unanswerable, answerable = (
        threshold.get("unanswerable_items"),
        threshold.get("answerable_items"),
    )
    if unanswerable is None or answerable is None:
        return [
            f"Abstention sweep: recommended evidence threshold {threshold['threshold']:.3f} "
            f"({answered} unanswerable answered, {refused} answerable refused)"
        ]
    degenerate = degenerate_sweep_line(threshold)
    if degenerate:
        return [degenerate]
    lines = [
        f"Abstention sweep: recommended evidence threshold {threshold['threshold']:.3f} "
        f"({answered} of {unanswerable} unanswerable answered, "
        f"{refused} of {answerable} answerable refused)"
    ]
    cap = MAX_UNANSWERABLE_ANSWERED_RATE
    if not unanswerable:
        lines.append(
            "  no no-answer items in this golden set: nothing bounds the unanswerable questions "
            "this threshold would answer; it only refuses the fewest answerable ones"
        )
        return lines
    allowed = allowed_unanswerable_answered(unanswerable, cap)
    if answered > allowed:
        lines.append(
            f"  no threshold keeps unanswerable questions answered within {cap:.0%} "
            f"(at most {allowed} of {unanswerable}): this one answers the fewest, so it is not "
            "a safe setting"
        )
    _, high = wilson_interval(answered, unanswerable)
    lines.append(
        f"  chosen on this run's own items, so its counts are optimistic: at it "
        f"{answered / unanswerable:.1%} of unanswerable questions are answered here, "
        f"95% CI up to {high:.1%} on {unanswerable} items; confirm it on items it was not "
        "chosen on before setting it"
    )
    return lines


def recommended_value(threshold: Mapping | None) -> float | None:
    """The threshold the sweep recommends (a ``recommended_threshold`` row), or None: without a
    pick, or when the pick refuses every answerable item (``degenerate_sweep_line``), which is
    no setting; the rows keep the rule's pick either way, and the summary says why it is none."""
    if threshold is None or degenerate_sweep_line(threshold):
        return None
    return threshold["threshold"]


def degenerate_sweep_line(threshold: Mapping) -> str | None:
    """The sweep's line when its recommendation refuses every answerable item, which is no
    setting at all; ``None`` otherwise (or without the item counts).

    The sweep picks, among the thresholds within the cap on unanswerable items answered, the one
    refusing the fewest answerable items, so a pick refusing all of them means that no threshold
    separates the two: "not measured" when every threshold refuses every answerable item
    (``fewest_answerable_refused``; without it, a golden set without no-answer items, where every
    threshold is within the cap), as when the system refuses on its own and there is nothing to
    sweep; else "none", with the cap that every threshold keeping to it pays for so (or, when none
    kept to it, that the one answering the fewest does).
    """
    from rag_eval_pipeline.lib.metrics.generation import (
        MAX_UNANSWERABLE_ANSWERED_RATE,
        allowed_unanswerable_answered,
    )

    unanswerable, answerable = (
        threshold.get("unanswerable_items"),
        threshold.get("answerable_items"),
    )
    refused = threshold["answerable_refused"]
    if unanswerable is None or not answerable or refused < answerable:
        return None
    head = "Abstention sweep: recommended evidence threshold: "
    fewest = threshold.get("fewest_answerable_refused")
    if fewest is None and not unanswerable:
        fewest = refused
    if fewest is not None and fewest >= answerable:
        return head + (
            f"not measured (every threshold refuses all {answerable} answerable items: the "
            "system refused them on its own or gave them no evidence score, so there is nothing "
            "to sweep)"
        )
    cap = MAX_UNANSWERABLE_ANSWERED_RATE
    allowed = allowed_unanswerable_answered(unanswerable, cap)
    within = f"at most {allowed} of {unanswerable} ({cap:.0%})"
    if threshold["unanswerable_answered"] > allowed:
        return head + (
            f"none: no threshold keeps unanswerable items answered {within}, and the one "
            f"answering the fewest refuses all {answerable} answerable items"
        )
    return head + (
        f"none: every threshold that keeps unanswerable items answered {within} refuses all "
        f"{answerable} answerable items"
    )
