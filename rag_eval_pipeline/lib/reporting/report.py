"""The per-run report: one evaluation run on one static page, and its charts for the UI.

- ``load_report_data``: everything the report shows, read from the warehouse tables with bound
  parameters, as plain data (lists of dicts, timestamps as text); ``load_history`` only the
  history, for the trend chart on its own;
- ``render_charts``: the three charts of ``lib.charts`` from that data, as PNG bytes;
- ``write_html_report``: a self-contained HTML page (charts inlined as data URIs, every text
  escaped), written to a temporary name and renamed, so a reader never sees half a page;
- ``report_markdown``: the three charts as markdown images, for a Dagster metadata entry.

The history is every completed run of the same golden set (``golden_digest``) and system
configuration (``system_config_digest``), plus the run itself, in night order; its corpus
digests show where the numbers stop being comparable.
"""

import html
import textwrap
from collections.abc import Mapping
from pathlib import Path

import duckdb
import polars as pl

from rag_eval_pipeline.lib.files import replaced_atomically
from rag_eval_pipeline.lib.inputs.golden import NO_ANSWER_STRATA
from rag_eval_pipeline.lib.metrics.generation import METRIC_ROW_SCHEMA
from rag_eval_pipeline.lib.reporting import charts
from rag_eval_pipeline.lib.reporting.judge_trust import judge_trust_tables
from rag_eval_pipeline.lib.reporting.summary import (
    HEADLINE_GENERATION,
    HEADLINE_RETRIEVAL,
    NO_ANSWER,
    counted,
    degenerate_sweep_line,
    gates_heading,
    headline_from_tables,
    in_order,
    not_measured_text,
    operations_block,
    recommended_value,
    strata_not_measured,
    sweep_lines,
    system_version,
)
from rag_eval_pipeline.lib.runs.record import measures_of
from rag_eval_pipeline.lib.store.sql import sql_query

HISTORY_MEASURES = ("Success@5", "nDCG@10")
NOT_MEASURED = "not measured"
TREND_MEASURE = "Success@5"
CHART_NAMES = ("abstention_sweep", "metric_trend", "strata")
CHART_CAPTIONS = {
    "abstention_sweep": "Abstention sweep: unanswerable questions answered and answerable "
    "questions refused against the evidence threshold",
    "metric_trend": f"{TREND_MEASURE} night by night for this golden set and system "
    "configuration; dashed lines mark corpus or measure-definition changes",
    "strata": "No-answer questions by stratum: refused correctly or answered anyway",
}


SWEEP_SCHEMA = {
    "threshold": pl.Float64,
    "unanswerable_answered": pl.Int64,
    "answerable_refused": pl.Int64,
    "recommended": pl.Boolean,
}
HISTORY_SCHEMA = {
    "partition_date": pl.String,
    "eval_run_id": pl.String,
    "snapshot_id": pl.String,
    "corpus_digest": pl.String,
    "measures_version": pl.String,
    "metric": pl.String,
    "value": pl.Float64,
    "ci_low": pl.Float64,
    "ci_high": pl.Float64,
    "n": pl.Int64,
}
STRATUM_SCHEMA = {
    name: dtype for name, dtype in METRIC_ROW_SCHEMA.items() if name != "interval_method"
}


def _rows(connection: duckdb.DuckDBPyConnection, query: str, parameters: dict) -> list[dict]:
    return connection.sql(query, params=parameters).pl().to_dicts()


def load_report_data(connection: duckdb.DuckDBPyConnection, eval_run_id: str) -> dict:
    """Everything the report of ``eval_run_id`` shows, as plain data.

    Keys: ``run`` (its ``eval_runs`` row), ``headline`` (``summary.headline_from_tables``),
    ``retrieval`` and ``generation`` (every scope), ``sufficiency_correctness``,
    ``abstention_sweep`` (every threshold), ``recommended_threshold`` (``summary.recommended_value``:
    none when the rule's pick refuses every answerable item), ``judge_calibration``
    and ``history`` (``HISTORY_MEASURES`` of every completed run with the same golden and
    system configuration digests, in night order). Raises ``KeyError`` for an unknown run.
    """
    headline = headline_from_tables(connection, eval_run_id)
    scope = {"run": eval_run_id}
    run = _rows(connection, sql_query("report", "run"), scope)[0]
    sweep = _rows(connection, sql_query("report", "sweep"), scope)
    return {
        "run": run,
        "headline": headline,
        "retrieval": _rows(connection, sql_query("report", "retrieval"), scope),
        "generation": _rows(connection, sql_query("report", "generation"), scope),
        "sufficiency_correctness": _rows(connection, sql_query("report", "sufficiency"), scope),
        "abstention_sweep": sweep,
        "recommended_threshold": recommended_value(headline.get("recommended_threshold")),
        "judge_calibration": _rows(connection, sql_query("report", "calibration"), scope),
        "history": _history_rows(connection, run),
    }


def _history_rows(connection: duckdb.DuckDBPyConnection, run: Mapping) -> list[dict]:
    return _rows(
        connection,
        sql_query("report", "history"),
        {
            "run": run["eval_run_id"],
            "suite": run["suite"],
            "golden": run["golden_digest"],
            "system": run["system_config_digest"],
            "measures": list(HISTORY_MEASURES),
        },
    )


def load_history(connection: duckdb.DuckDBPyConnection, eval_run_id: str) -> pl.DataFrame:
    """``HISTORY_MEASURES`` of every completed run with the golden-set and system configuration
    digests of ``eval_run_id`` (and of that run, completed or not), in night order: the input
    of ``charts.metric_trend_png``. Raises ``KeyError`` for an unknown run."""
    run = _rows(connection, sql_query("report", "run"), {"run": eval_run_id})
    if not run:
        raise KeyError(f"no evaluation run {eval_run_id!r} in the warehouse")
    return _frame(_history_rows(connection, run[0]), HISTORY_SCHEMA)


def report_path_for(warehouse_path: Path, eval_run_id: str) -> Path:
    """Where a run's report lives: ``<warehouse dir>/reports/<eval_run_id>.html``."""
    return Path(warehouse_path).parent / "reports" / f"{eval_run_id}.html"


def _frame(rows: list[dict], schema: dict) -> pl.DataFrame:
    return pl.DataFrame([{k: row.get(k) for k in schema} for row in rows], schema=schema)


def render_charts(data: Mapping) -> dict[str, bytes]:
    """The three charts of the report as PNG bytes, keyed by ``CHART_NAMES``."""
    return {
        "abstention_sweep": charts.abstention_sweep_png(
            _frame(data["abstention_sweep"], SWEEP_SCHEMA),
            data["recommended_threshold"],
            unrecommended=_unrecommended(data),
        ),
        "metric_trend": charts.metric_trend_png(
            _frame(data["history"], HISTORY_SCHEMA), TREND_MEASURE
        ),
        "strata": charts.stratum_bars_png(_frame(data["headline"]["no_answer"], STRATUM_SCHEMA)),
    }


def _unrecommended(data: Mapping) -> str | None:
    """The sweep chart's subtitle when the rule picked a threshold refusing every answerable
    item, which is no recommendation (``load_report_data``): the summary's words for it
    (``degenerate_sweep_line``), wrapped to the chart's width; None otherwise."""
    chosen = data["headline"].get("recommended_threshold")
    line = degenerate_sweep_line(chosen) if chosen is not None else None
    return textwrap.fill("R" + line.removeprefix("Abstention sweep: r"), 84) if line else None


def report_markdown(data: Mapping, rendered: Mapping[str, bytes] | None = None) -> str:
    """The three charts as markdown images (data URIs) with a line of context each, for a
    Dagster ``MetadataValue.md`` entry; ``rendered`` reuses charts already drawn."""
    rendered = rendered or render_charts(data)
    run = data["run"]
    lines = [
        f"**Evaluation run** `{run['eval_run_id']}` (night {run['partition_date']}), "
        f"corpus `{run['corpus_digest'][:12]}`, golden set `{run['golden_digest'][:12]}`",
        "",
    ]
    for name in CHART_NAMES:
        lines += [
            CHART_CAPTIONS[name],
            "",
            charts.markdown_image(CHART_CAPTIONS[name], rendered[name]),
            "",
        ]
    return "\n".join(lines)


def _text(value: object) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


def _interval(row: Mapping) -> str:
    if row.get("ci_low") is None or row.get("ci_high") is None:
        return ""
    return f"{row['ci_low']:.3f} to {row['ci_high']:.3f}"


def _value_with_interval(row: Mapping) -> str:
    interval = _interval(row)
    return f"{_text(row['value'])} ({interval})" if interval else _text(row["value"])


def _table(
    header: list[str] | None,
    body: list[list[object]],
    caption: str = "",
    wrap: tuple[int, ...] = (),
) -> str:
    """An HTML table of escaped text; columns in ``wrap`` may break (digests, reasons)."""
    head = ""
    if header:
        cells = "".join(f"<th>{html.escape(_text(h))}</th>" for h in header)
        head = f"<thead><tr>{cells}</tr></thead>"
    rows = "".join(
        "<tr>"
        + "".join(
            f'<td class="wrap">{html.escape(_text(v))}</td>'
            if i in wrap
            else f"<td>{html.escape(_text(v))}</td>"
            for i, v in enumerate(row)
        )
        + "</tr>"
        for row in body
    )
    caption_html = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    return f'<div class="scroll"><table>{caption_html}{head}<tbody>{rows}</tbody></table></div>'


def _figure_html(name: str, png: bytes) -> str:
    caption = html.escape(CHART_CAPTIONS[name])
    return (
        f'<figure><img src="{charts.png_data_uri(png)}" alt="{caption}" '
        f'width="{charts.WIDTH_PX}"><figcaption>{caption}</figcaption></figure>'
    )


def _metric_rows(rows: list[dict], key: str, finished: bool = True) -> list[list[object]]:
    """A row per figure, its n with its unit; one without a value reads "not measured" and why."""
    return [
        [row[key], row["value"], _interval(row), counted(row, row[key]), row.get("interval_method")]
        if row.get("value") is not None
        else [row[key], not_measured_text(row, key, finished), "", "", ""]
        for row in rows
    ]


def _ordered(rows: list[dict], key: str, names: tuple[str, ...]) -> list[dict]:
    order = {name: i for i, name in enumerate(names)}
    return sorted((r for r in rows if r[key] in order), key=lambda r: order[r[key]])


def _identity_table(run: Mapping) -> str:
    fields = [
        ("Evaluation run id", "eval_run_id"),
        ("Suite", "suite"),
        ("Status", "status"),
        ("Night", "partition_date"),
        ("Dagster run id", "dagster_run_id"),
        ("Corpus snapshot", "snapshot_id"),
        ("Corpus digest", "corpus_digest"),
        ("Golden set", "golden_set"),
        ("Golden-set digest", "golden_digest"),
        ("System", "system_id"),
        ("System version", "system_version"),
        ("System configuration digest", "system_config_digest"),
        ("Judge", "judge_id"),
        ("Judge configuration digest", "judge_config_digest"),
        ("Run settings digest", "settings_digest"),
        ("Measure definitions", "measures_version"),
        ("Baseline run", "baseline_run_id"),
        ("Is a baseline", "is_baseline"),
        ("Re-baseline", "rebaseline"),
        ("Re-baseline reason", "rebaseline_reason"),
        ("Re-baseline requested by", "rebaseline_requested_by"),
        ("Started (UTC)", "started_at"),
        ("Completed (UTC)", "completed_at"),
    ]
    run = {
        **run,
        "system_version": system_version(run) or "not reported",
        "measures_version": measures_of(run),
    }
    return _table(None, [[label, run.get(key)] for label, key in fields], wrap=(1,))


def _retrieval_html(data: Mapping) -> str:
    overall = [r for r in data["retrieval"] if r["scope"] == "overall"]
    by_language = [r for r in data["retrieval"] if r["scope"] == "language"]
    header = ["measure", "value", "95% interval", "n", "interval"]
    parts = [
        "<h2>Retrieval (answerable items, relevant = grade &ge; 2)</h2>",
        _table(
            header,
            _metric_rows(
                in_order(overall, "measure", HEADLINE_RETRIEVAL, _finished(data)),
                "measure",
                _finished(data),
            ),
            wrap=(1,),
        ),
    ]
    languages = sorted({r["scope_value"] for r in by_language})
    if languages:
        parts.append("<h3>By language</h3>")
        for language in languages:
            rows = [r for r in by_language if r["scope_value"] == language]
            parts.append(
                _table(
                    header,
                    _metric_rows(_ordered(rows, "measure", HEADLINE_RETRIEVAL), "measure"),
                    caption=f"language: {language}",
                )
            )
    others = [r for r in overall if r["measure"] not in HEADLINE_RETRIEVAL]
    if others:
        parts.append(
            "<details><summary>Every retrieval measure</summary>"
            + _table(header, _metric_rows(others, "measure"))
            + "</details>"
        )
    return "".join(parts)


def _finished(data: Mapping) -> bool:
    return data["run"].get("status") in (None, "complete")


def _generation_html(data: Mapping) -> str:
    """The headline generation figures, each n with its unit (items or claims); a figure
    without a value reads "not measured" and why, as in the summary."""
    answerable = [
        r
        for r in data["generation"]
        if r["scope"] == "overall" and r["scope_value"] == "answerable"
    ]
    finished = _finished(data)
    rows = in_order(answerable, "metric", HEADLINE_GENERATION, finished)
    return "<h2>Generation (answerable items)</h2>" + _table(
        ["metric", "value", "95% interval", "n", "interval"],
        _metric_rows(rows, "metric", finished),
        wrap=(1,),
    )


def _no_answer_html(data: Mapping, png: bytes) -> str:
    rows = data["headline"]["no_answer"]
    strata = [
        s for s in (*NO_ANSWER_STRATA, "no_answer") if any(r["scope_value"] == s for r in rows)
    ]
    strata += sorted({r["scope_value"] for r in rows} - set(strata))
    body = []
    for stratum in strata:
        cells: list[object] = [stratum]
        for metric in NO_ANSWER:
            found = [r for r in rows if r["scope_value"] == stratum and r["metric"] == metric]
            cells += (
                [found[0]["value"], _interval(found[0]), counted(found[0])] if found else [None] * 3
            )
        body.append(cells)
    for row in strata_not_measured(rows, _finished(data)):
        missing = f"not measured ({row['not_measured']})"
        body.append([row["stratum"], *([missing, "", ""] * len(NO_ANSWER))])
    header = ["stratum"]
    for metric in NO_ANSWER:
        header += [metric, "95% interval", "n"]
    return (
        "<h2>No-answer questions (reported apart, never averaged into the headline)</h2>"
        + _figure_html("strata", png)
        + _table(header, body, caption="no_answer = all no-answer strata together")
    )


def _sufficiency_html(data: Mapping) -> str:
    counts = {
        (row["context_sufficient"], row["answer_correct"]): row["count"]
        for row in data["sufficiency_correctness"]
    }
    body = [
        [label, counts.get((sufficient, True)), counts.get((sufficient, False))]
        for label, sufficient in (("context sufficient", True), ("context insufficient", False))
    ]
    return "<h2>Context sufficiency &times; answer correctness (answerable items)</h2>" + _table(
        ["", "answer correct", "answer incorrect"], body
    )


def _sweep_html(data: Mapping, png: bytes) -> str:
    sweep = data["abstention_sweep"]
    chosen = data["headline"].get("recommended_threshold")
    caveats: list[str] = []
    if chosen:
        # The summary's lines: the threshold with its counts, then what it cannot be trusted for.
        first, *caveats = sweep_lines(chosen)
        sentence = first.removeprefix("Abstention sweep: recommended").strip()
        sentence = f"Recommended {sentence}."
    else:
        sentence = "No recommended evidence threshold for this run."
    table = _table(
        ["threshold", "unanswerable answered", "answerable refused", "recommended"],
        [
            [
                f"{r['threshold']:.3f}",
                r["unanswerable_answered"],
                r["answerable_refused"],
                r["recommended"] and data["recommended_threshold"] is not None,
            ]
            for r in sweep
        ],
    )
    notes = "".join(
        f'<p class="caveat">{html.escape(line.strip()[0].upper() + line.strip()[1:])}.</p>'
        for line in caveats
    )
    return (
        "<h2>Abstention sweep</h2>"
        + _figure_html("abstention_sweep", png)
        + f"<p>{html.escape(sentence)}</p>"
        + notes
        + f"<details><summary>Every threshold ({len(sweep)})</summary>{table}</details>"
    )


def _calibration_html(data: Mapping) -> str:
    return "<h2>Judge calibration</h2>" + _table(
        ["judge", "n", "agreement", "95% interval", "Cohen's kappa", "calibrated", "reason"],
        [
            [
                r["judge_id"],
                r["n"],
                r["agreement"],
                _interval(r),
                r["kappa"],
                r["calibrated"],
                r["reason"],
            ]
            for r in data["judge_calibration"]
        ],
        wrap=(6,),
    )


def _judge_trust_html(data: Mapping) -> str:
    """Judge-only and prediction-powered rates, stability, spending and claim diagnostics."""
    tables = judge_trust_tables(data["headline"].get("judge_trust"))
    if not tables:
        return ""
    parts = ["<h2>Trusting the judge</h2>"]
    for heading, header, body in tables:
        parts += [f"<h3>{html.escape(heading)}</h3>", _table(header, body, wrap=(len(header) - 1,))]
    return "".join(parts)


def _history_html(data: Mapping, png: bytes) -> str:
    run_id = data["run"]["eval_run_id"]
    history = data["history"]
    runs: dict[str, dict] = {}
    for row in history:
        entry = runs.setdefault(row["eval_run_id"], {**row})
        entry[row["metric"]] = row
    columns = ("partition_date", "corpus_digest", "measures_version")
    frame = pl.DataFrame(
        [{name: r.get(name) for name in columns} for r in runs.values()],
        schema=dict.fromkeys(columns, pl.String),
    )
    breaks = charts.comparison_breaks(frame)
    body = []
    for position, (eval_run, entry) in enumerate(runs.items()):
        note = ["this run"] if eval_run == run_id else []
        if position in breaks:
            changes = " and ".join(change.split(" to ")[0] for change in breaks[position])
            note.append(f"{changes}: not comparable with the row above")
        cells: list[object] = [
            entry["partition_date"],
            eval_run,
            entry["snapshot_id"],
            entry["corpus_digest"],
        ]
        for measure in HISTORY_MEASURES:
            figure = entry.get(measure)
            cells.append(_value_with_interval(figure) if figure else None)
        body.append([*cells, "; ".join(note)])
    header = [
        "night",
        "evaluation run",
        "snapshot",
        "corpus digest",
        *(f"{measure} (95% interval)" for measure in HISTORY_MEASURES),
        "",
    ]
    return (
        "<h2>History of this golden set and system configuration</h2>"
        + _figure_html("metric_trend", png)
        + _table(header, body, wrap=(3, len(header) - 1))
    )


STYLESHEET = """
body { font-family: system-ui, sans-serif; max-width: 72rem; margin: 2rem auto; padding: 0 1rem;
       color: #222; line-height: 1.4; }
table { border-collapse: collapse; margin: 0.5rem 0 1rem; font-size: 0.9rem; }
th, td { border: 1px solid #ccc; padding: 0.25rem 0.5rem; text-align: left;
         font-variant-numeric: tabular-nums; white-space: nowrap; }
td.wrap { white-space: normal; overflow-wrap: anywhere; min-width: 9rem; }
.scroll { overflow-x: auto; }
th { background: #f3f3f3; }
caption { text-align: left; font-weight: bold; padding: 0.25rem 0; }
figure { margin: 1rem 0; }
img { max-width: 100%; height: auto; }
figcaption { color: #555; font-size: 0.9rem; }
.incomplete { background: #fde8e0; border: 1px solid #D55E00; padding: 0.5rem; }
"""


def _gates_html(data: Mapping) -> str:
    """The release gates checked on the run (``gate_results``, those not passed first), as the
    summary lists them; nothing for a warehouse written before runs kept their gates."""
    gates = data["headline"].get("gates")
    if gates is None:
        return ""
    if not gates:
        return (
            "<h2>Release gates</h2><p>"
            + html.escape(
                "None recorded for this run (none in its gates file, or run before runs kept "
                "their gates)."
            )
            + "</p>"
        )
    return f"<h2>{html.escape(gates_heading(gates))}</h2>" + _table(
        ["gate", "status", "observed", "test", "message"],
        [
            [
                gate["gate"],
                gate["status"],
                NOT_MEASURED if gate["observed"] is None else gate["observed"],
                f"{gate['op']} {gate['threshold']:g}",
                gate["message"],
            ]
            for gate in gates
        ],
        wrap=(4,),
    )


def _operations_html(data: Mapping) -> str:
    """The calls to the system under test (``generation_metrics``, scope ``operations``):
    system errors, requests and retries, latency, tokens and cost, as the summary gives them."""
    lines = operations_block(data["headline"])
    if not lines:
        return ""
    cells = [[part.strip() for part in line.strip().split("  ", 1)] for line in lines]
    return "<h2>Calls to the system under test</h2>" + _table(None, cells)


def _drift_html(data: Mapping) -> str:
    """The golden items whose answering passage is not current, or changed, in the run's
    snapshot (``golden_drift``), the first few with why, as the summary's identity block gives
    them; nothing when none drifted."""
    drift = data["headline"].get("golden_drift")
    if not drift or not drift["drifted"]:
        return ""
    more = drift["drifted"] - len(drift["first"])
    return (
        "<h2>Golden drift</h2><p>"
        + html.escape(
            f"{drift['drifted']} item(s) whose answering passage is not current, or changed, in "
            "this snapshot, scored like the rest: their figures may have moved with the corpus, "
            "not the system; re-label them (golden_drift lists every one)."
        )
        + "</p>"
        + _table(
            ["item", "why"],
            [[row["item_id"], row["drift_reason"]] for row in drift["first"]],
            caption=f"the first {len(drift['first'])}" + (f", and {more} more" if more > 0 else ""),
            wrap=(1,),
        )
    )


def _comparison_html(data: Mapping) -> str:
    """Where the night's comparison with its baseline is: it runs after the page is written."""
    return (
        "<h2>Comparison with the baseline</h2><p>"
        + html.escape(
            "A night's comparison with its suite's baseline runs after this page is written "
            "(run_comparison_job, when the comparison guard finds the runs comparable), and so "
            "does the regression gate (no_significant_regression), which is not among the "
            "release gates above: they are in the run_comparisons table and on the "
            "run_comparison asset in the UI; rag-eval summary "
            f"{data['run']['eval_run_id']} says how the gate went, or why the run was not "
            f"compared, and rag-eval compare {data['run']['eval_run_id']} <baseline run> "
            "compares the two at any time."
        )
        + "</p>"
    )


def _status_html(run: Mapping) -> str:
    """A warning above everything when the run did not complete."""
    if run.get("status") in (None, "complete"):
        return ""
    reason = f": {run['status_reason']}" if run.get("status_reason") else ""
    return (
        '<p class="incomplete"><strong>'
        + html.escape(
            f"Incomplete: this run is {run['status']}{reason}. Its figures are not a finished night."
        )
        + "</strong></p>"
    )


def report_html(data: Mapping, rendered: Mapping[str, bytes] | None = None) -> str:
    """The report page as one HTML string (see ``write_html_report``)."""
    rendered = rendered or render_charts(data)
    run = data["run"]
    title = f"Evaluation run {run['eval_run_id']}"
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f"<title>{html.escape(title)}</title>",
            f"<style>{STYLESHEET}</style></head><body>",
            f"<h1>{html.escape(title)}</h1>",
            "<p>"
            + html.escape(
                f"Night {run['partition_date']}, Dagster run {run['dagster_run_id']}, "
                f"corpus snapshot {run['snapshot_id']}."
            )
            + "</p>",
            _status_html(run),
            "<h2>Identity and digests</h2>",
            _identity_table(run),
            _drift_html(data),
            _retrieval_html(data),
            _generation_html(data),
            _no_answer_html(data, rendered["strata"]),
            _sufficiency_html(data),
            _sweep_html(data, rendered["abstention_sweep"]),
            _calibration_html(data),
            _judge_trust_html(data),
            _history_html(data, rendered["metric_trend"]),
            _gates_html(data),
            _operations_html(data),
            _comparison_html(data),
            "<p><small>"
            + html.escape(
                "Read from the warehouse tables eval_runs, retrieval_metrics, generation_metrics, "
                "sufficiency_correctness, abstention_sweep, judge_calibration, "
                "judge_rate_estimates, judge_repeat_verdicts, judge_usage, diagnostic_metrics and "
                "gate_results, "
                "keyed by "
                f"eval_run_id = {run['eval_run_id']}."
            )
            + "</small></p>",
            "</body></html>",
            "",
        ]
    )


def write_html_report(
    data: Mapping, path: Path, rendered: Mapping[str, bytes] | None = None
) -> Path:
    """Write the report page to ``path`` (parents created) and return ``path``.

    The page is self-contained: the charts are inlined as data URIs, so it can be mailed or
    archived as one file. It is written to a temporary name beside ``path`` and renamed, so a
    reader sees the previous page or the new one, never a partial one.
    """
    path = Path(path)
    with replaced_atomically(path) as temporary:
        temporary.write_text(report_html(data, rendered), encoding="utf-8")
    return path
