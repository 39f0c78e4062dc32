"""Charts of one evaluation run, as PNG bytes, for people who would rather look than read.

- ``abstention_sweep_png``: both error counts of the evidence threshold (unanswerable questions
  answered, answerable questions refused) against the threshold, the recommended one marked;
- ``metric_trend_png``: one metric night by night with its 95% intervals, a dashed line wherever
  the corpus digest, the golden-set digest or the measure definitions change (numbers on either
  side of it are not comparable);
- ``stratum_bars_png``: correct-refusal and confident-wrong rates per no-answer stratum.

Each has a ``*_figure`` twin returning the matplotlib ``Figure`` (what the tests inspect). Empty
or unusable input gives a chart that says "no data" and why, never an exception: a chart must not
fail the materialization of the figures it illustrates. Error bars are clamped at zero length: an
interval stored a hair on the wrong side of its value (a perfect score's Wilson bound of
0.9999999999999999) draws as no bar on that side instead of making Matplotlib raise.

Rendering goes through the Agg canvas on a bare ``Figure``, never through ``pyplot``: no global
figure registry to leak from a long-lived process, no GUI backend, and the caller's backend
choice is left alone. The output is deterministic: fixed pixel size, Matplotlib's default style
plus the settings below (whatever the local matplotlibrc says), a deterministic palette
quantisation and no ``Software`` or date chunk in the PNG, so the same data gives the same bytes.
Matplotlib and Pillow are imported by the functions that draw, not with the module: a process
that never draws (the command that starts a night on workers) does not pay half a second for them.
"""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

from rag_eval_pipeline.lib.inputs.golden import NO_ANSWER_STRATA
from rag_eval_pipeline.lib.runs.record import run_changes

# How a break of the trend names what changed (``record.run_changes``' names).
BREAK_LABELS = {
    "corpus": "corpus",
    "golden set": "golden set",
    "measure definitions": "definitions",
}

WIDTH_PX = 800
HEIGHT_PX = 450
DPI = 100
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
NO_DATA = "no data"

SWEEP_COLUMNS = ("threshold", "unanswerable_answered", "answerable_refused")
TREND_COLUMNS = ("partition_date", "eval_run_id", "corpus_digest", "value", "ci_low", "ci_high")
STRATUM_COLUMNS = ("scope_value", "metric", "value", "ci_low", "ci_high", "n")

# Okabe-Ito colours: distinguishable with the common colour-vision deficiencies.
BLUE = "#0072B2"
VERMILLION = "#D55E00"
GREY = "#555555"

STYLE = {
    "font.family": "DejaVu Sans",
    "font.size": 11,
    "axes.titlesize": 13,
    "axes.titleweight": "bold",
    "axes.labelsize": 11,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.color": "#dddddd",
    "grid.linewidth": 0.8,
    "legend.frameon": False,
    "legend.fontsize": 10,
}

METRIC_WORDS = {
    "Success@5": "Share of answerable questions with a relevant passage in the top 5",
    "nDCG@10": "Ranking quality of the top 10 (nDCG@10, 0 to 1)",
    "R@5": "Share of relevant passages found in the top 5",
    "RR@5": "Reciprocal rank of the first relevant passage (top 5)",
}
BAR_METRICS = {
    "correct_refusal_rate": ("Refused, as it should (higher is better)", BLUE),
    "confident_wrong_rate": ("Answered anyway (lower is better)", VERMILLION),
}
STRATUM_WORDS = {
    "out_of_scope": "out of scope",
    "near_miss": "near miss",
    "false_premise": "false premise",
    "prompt_injection": "prompt injection",
    "withdrawn_document": "withdrawn document",
    "no_answer": "all no-answer",
}


def import_drawing_modules() -> None:
    """Import Matplotlib (its figure, Agg canvas and styles) and Pillow, which the functions
    that draw import when first called: about 0.4 s a process can spend on another thread while
    it waits for something else (the summary step, while DuckDB loads the warehouse)."""
    from matplotlib import style  # noqa: F401
    from matplotlib.backends import backend_agg  # noqa: F401
    from matplotlib.figure import Figure  # noqa: F401
    from PIL import Image  # noqa: F401


@contextmanager
def _style() -> Iterator[None]:
    """Matplotlib's defaults plus ours, so a local matplotlibrc cannot change the bytes."""
    from matplotlib import style as mpl_style

    with mpl_style.context(["default", STYLE]):
        yield


def _new_figure() -> tuple[Figure, Axes]:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(WIDTH_PX / DPI, HEIGHT_PX / DPI), dpi=DPI, layout="constrained")
    return figure, figure.add_subplot()


def figure_png(figure: Figure) -> bytes:
    """A figure of this module as PNG bytes.

    Drawn with Agg and encoded as an 8-bit palette PNG, about a third of the size of
    Matplotlib's RGBA output (these bytes travel inside Dagster event metadata) and no
    different to the eye: a chart has few colours besides its anti-aliasing. Pillow is
    Matplotlib's own PNG writer, and it adds no date or software chunk."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from PIL import Image

    with _style():
        canvas = FigureCanvasAgg(figure)
        canvas.draw()
        rgba = Image.fromarray(np.asarray(canvas.buffer_rgba()))
    palette = rgba.convert("RGB").quantize(
        colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE
    )
    buffer = io.BytesIO()
    palette.save(buffer, format="PNG", optimize=True)
    return buffer.getvalue()


def _problem(frame: pl.DataFrame | None, columns: tuple[str, ...]) -> str | None:
    """Why ``frame`` cannot be drawn, or None when it can."""
    if frame is None:
        return "no rows"
    missing = [column for column in columns if column not in frame.columns]
    if missing:
        return f"missing column(s): {', '.join(missing)}"
    if frame.height == 0:
        return "no rows"
    return None


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def _titles(figure: Figure, axes: Axes, title: str, subtitle: str) -> None:
    """A bold title and a plain-words subtitle, both left-aligned above the plot."""
    figure.suptitle(title, x=0.01, ha="left", fontsize=13, fontweight="bold")
    axes.set_title(subtitle, loc="left", fontsize=10.5, fontweight="normal", color=GREY)


def no_data_figure(title: str, reason: str) -> Figure:
    """A chart of the given title that says "no data" and why."""
    with _style():
        figure, axes = _new_figure()
        axes.set_axis_off()
        figure.suptitle(title, x=0.01, ha="left", fontsize=13, fontweight="bold")
        axes.text(0.5, 0.55, NO_DATA, ha="center", va="center", fontsize=28, color=GREY)
        axes.text(0.5, 0.38, reason, ha="center", va="center", fontsize=12, color=GREY)
    return figure


SWEEP_TITLE = "Abstention sweep: both kinds of error by evidence threshold"


def abstention_sweep_figure(
    sweep: pl.DataFrame, recommended: float | None, *, unrecommended: str | None = None
) -> Figure:
    """Unanswerable questions answered and answerable questions refused against the evidence
    threshold (a question is answered when its best retrieval score reaches the threshold), as
    steps, with ``recommended`` marked by a vertical line and its two counts; without one,
    ``unrecommended`` (why none is recommended) is the subtitle."""
    problem = _problem(sweep, SWEEP_COLUMNS)
    if problem is None:
        sweep = (
            sweep.select(
                pl.col("threshold").cast(pl.Float64, strict=False),
                pl.col("unanswerable_answered", "answerable_refused").cast(pl.Int64, strict=False),
            )
            .drop_nulls()
            .filter(pl.col("threshold").is_finite())
            .sort("threshold")
        )
        problem = "no rows with a threshold and both counts" if sweep.height == 0 else None
    if problem is not None:
        return no_data_figure(SWEEP_TITLE, problem)
    thresholds = sweep["threshold"].to_list()
    with _style():
        figure, axes = _new_figure()
        for column, color, label in (
            ("unanswerable_answered", VERMILLION, "Unanswerable questions answered"),
            ("answerable_refused", BLUE, "Answerable questions refused"),
        ):
            axes.step(
                thresholds,
                sweep[column].to_list(),
                where="post",
                color=color,
                linewidth=2,
                marker="o",
                markersize=3,
                label=label,
            )
        subtitle = (
            unrecommended
            or "A question is answered when its best retrieval score reaches the threshold"
        )
        if recommended is not None and _finite(recommended):
            axes.axvline(
                recommended,
                color="black",
                linestyle="--",
                linewidth=1.2,
                label="Recommended threshold",
            )
            subtitle = f"Recommended {recommended:.2f} (dashed)"
            at = sweep.filter((pl.col("threshold") - recommended).abs() < 1e-9)
            if at.height:
                subtitle += (
                    f": {at['unanswerable_answered'][0]} unanswerable answered, "
                    f"{at['answerable_refused'][0]} answerable refused"
                )
        axes.set_ylim(bottom=0)
        _titles(figure, axes, SWEEP_TITLE, subtitle)
        axes.set_xlabel("Evidence threshold (best retrieval score needed to answer)")
        axes.set_ylabel("Questions")
        figure.legend(loc="outside lower center", ncols=3, handlelength=1.6, columnspacing=1.2)
    return figure


def abstention_sweep_png(
    sweep: pl.DataFrame, recommended: float | None, *, unrecommended: str | None = None
) -> bytes:
    """The abstention sweep chart as PNG bytes (see ``abstention_sweep_figure``)."""
    return figure_png(abstention_sweep_figure(sweep, recommended, unrecommended=unrecommended))


def night_order(history: pl.DataFrame) -> pl.DataFrame:
    """``history`` sorted by night; runs of the same night keep the order they were given in."""
    return history.sort("partition_date", maintain_order=True, nulls_last=True)


def corpus_changes(history: pl.DataFrame) -> list[int]:
    """Positions, in night order, of the runs whose corpus digest differs from the run before.

    ``[a, a, b, b, a]`` gives ``[2, 4]``; one run or none gives ``[]``.
    """
    if history.height == 0:
        return []
    digests = night_order(history)["corpus_digest"].to_list()
    return [i for i in range(1, len(digests)) if digests[i] != digests[i - 1]]


def comparison_breaks(history: pl.DataFrame) -> dict[int, list[str]]:
    """Positions, in night order, of the runs that do not compare with the run before
    (``record.comparability``), each with what changed: ``"corpus changed to <8 hex>"`` where
    the corpus digest changes, ``"golden set changed to <8 hex>"`` where the golden-set digest
    does (a ``golden_digest`` column, when ``history`` has one) and ``"definitions changed to
    <version>"`` where the measure definitions do (a ``measures_version`` column, when
    ``history`` has one; null is ``unrecorded``)."""
    if history.height == 0:
        return {}
    rows = night_order(history).to_dicts()
    breaks = {}
    for position in range(1, len(rows)):
        changes = run_changes(rows[position - 1], rows[position])
        if changes:
            breaks[position] = [
                f"{BREAK_LABELS[what]} changed to "
                f"{new if what == 'measure definitions' else new[:8]}"
                for what, _, new in changes
            ]
    return breaks


def _night_labels(ordered: pl.DataFrame) -> list[str]:
    dates = [str(d) for d in ordered["partition_date"].to_list()]
    repeated = {d for d in dates if dates.count(d) > 1}
    return [
        f"{date}\n{run_id[-6:]}" if date in repeated else date
        for date, run_id in zip(dates, ordered["eval_run_id"].to_list(), strict=True)
    ]


def metric_trend_figure(history: pl.DataFrame, metric: str) -> Figure:
    """``metric`` night by night: a point per evaluation run with its 95% interval, joined by a
    line only while the runs compare (``comparison_breaks``: the same corpus digest, golden-set
    digest and measure definitions, for the columns ``history`` has); a dashed vertical line
    labelled with what changed (the first 8 characters of the new digest, the new definitions'
    version) wherever that changes from one run to the next.
    ``history`` may hold several metrics in a ``metric`` column; only ``metric`` is drawn."""
    title = f"{metric} night by night"
    problem = _problem(history, TREND_COLUMNS)
    if problem is None:
        if "metric" in history.columns:
            history = history.filter(pl.col("metric") == metric)
        history = history.with_columns(
            pl.col("value", "ci_low", "ci_high").cast(pl.Float64, strict=False)
        ).filter(pl.col("value").is_finite())
        problem = f"no values of {metric}" if history.height == 0 else None
    if problem is not None:
        return no_data_figure(title, problem)
    ordered = night_order(history)
    values = ordered["value"].to_list()
    lows = [lo if _finite(lo) else v for lo, v in zip(ordered["ci_low"], values, strict=True)]
    highs = [hi if _finite(hi) else v for hi, v in zip(ordered["ci_high"], values, strict=True)]
    breaks = comparison_breaks(ordered)
    changes = list(breaks)
    with _style():
        figure, axes = _new_figure()
        for start, stop in zip([0, *changes], [*changes, len(values)], strict=True):
            positions = list(range(start, stop))
            axes.errorbar(
                positions,
                values[start:stop],
                yerr=[
                    [max(0.0, values[i] - lows[i]) for i in positions],
                    [max(0.0, highs[i] - values[i]) for i in positions],
                ],
                color=BLUE,
                marker="o",
                markersize=6,
                linewidth=1.5,
                capsize=4,
            )
        if len(values) <= 12:
            for position, value in enumerate(values):
                axes.annotate(
                    f"{value:.2f}",
                    xy=(position, value),
                    xytext=(7, 0),
                    textcoords="offset points",
                    va="center",
                    fontsize=10,
                )
        for change in changes:
            axes.axvline(change - 0.5, color=GREY, linestyle="--", linewidth=1.2)
            axes.annotate(
                "\n".join(label.replace(" to ", "\nto ") for label in breaks[change]),
                xy=(change - 0.5, 0.98),
                xycoords=axes.get_xaxis_transform(),
                xytext=(5, 0),
                textcoords="offset points",
                ha="left",
                va="top",
                fontsize=10,
                color=GREY,
            )
        labels = _night_labels(ordered)
        step = max(1, math.ceil(len(labels) / 12))
        axes.set_xticks(range(0, len(labels), step), labels[::step])
        if step > 1 or len(labels) > 6:
            axes.tick_params(axis="x", labelrotation=30)
        axes.set_xlim(-0.6, len(values) - 0.4)
        span = [*lows, *highs, *values]
        if min(span) >= 0 and max(span) <= 1:
            # Room above 1.0 for the labels of what changed.
            axes.set_ylim(0, 1.18)
            axes.set_yticks([0, 0.2, 0.4, 0.6, 0.8, 1.0])
        axes.grid(axis="x", visible=False)
        words = METRIC_WORDS.get(metric, metric)
        _titles(figure, axes, title, f"{words}; bars: 95% interval")
        axes.set_xlabel("Night (evaluation run)")
        axes.set_ylabel(metric)
    return figure


def metric_trend_png(history: pl.DataFrame, metric: str) -> bytes:
    """The metric trend chart as PNG bytes (see ``metric_trend_figure``)."""
    return figure_png(metric_trend_figure(history, metric))


STRATUM_TITLE = "No-answer questions by stratum"


def _stratum_order(strata: list[str]) -> list[str]:
    known = [s for s in NO_ANSWER_STRATA if s in strata]
    others = sorted(s for s in strata if s not in NO_ANSWER_STRATA and s != "no_answer")
    return known + others + (["no_answer"] if "no_answer" in strata else [])


def stratum_bars_figure(rows: pl.DataFrame) -> Figure:
    """Grouped horizontal bars per stratum (``scope_value``): the correct-refusal rate and the
    confident-wrong rate, each with its 95% interval as a whisker and labelled with its value
    and ``n``. Other metrics in ``rows`` are ignored; ``no_answer`` (all no-answer items) is
    drawn last."""
    problem = _problem(rows, STRATUM_COLUMNS)
    if problem is None:
        rows = rows.with_columns(
            pl.col("value", "ci_low", "ci_high").cast(pl.Float64, strict=False)
        ).filter(pl.col("metric").is_in(list(BAR_METRICS)) & pl.col("value").is_finite())
        problem = "no correct-refusal or confident-wrong rates" if rows.height == 0 else None
    if problem is not None:
        return no_data_figure(STRATUM_TITLE, problem)
    strata = _stratum_order(rows["scope_value"].unique().to_list())
    place = {stratum: i for i, stratum in enumerate(strata)}
    height = 0.38
    with _style():
        figure, axes = _new_figure()
        for offset, (metric, (label, colour)) in zip(
            (-height / 2, height / 2), BAR_METRICS.items(), strict=True
        ):
            bars = rows.filter(pl.col("metric") == metric)
            if bars.height == 0:
                continue
            positions = [place[s] + offset for s in bars["scope_value"]]
            values = bars["value"].to_list()
            lows = [lo if _finite(lo) else v for lo, v in zip(bars["ci_low"], values, strict=True)]
            highs = [
                hi if _finite(hi) else v for hi, v in zip(bars["ci_high"], values, strict=True)
            ]
            axes.barh(
                positions,
                values,
                height=height,
                color=colour,
                label=label,
                xerr=[
                    [max(0.0, v - lo) for v, lo in zip(values, lows, strict=True)],
                    [max(0.0, hi - v) for v, hi in zip(values, highs, strict=True)],
                ],
                error_kw={"ecolor": "black", "capsize": 3, "elinewidth": 1},
            )
            for y, value, high, n in zip(positions, values, highs, bars["n"], strict=True):
                axes.text(
                    max(value, high) + 0.015,
                    y,
                    f"{value:.0%}  n={n}",
                    va="center",
                    fontsize=9,
                )
        axes.set_yticks(range(len(strata)), [STRATUM_WORDS.get(s, s) for s in strata])
        axes.invert_yaxis()
        axes.set_xlim(0, 1.25)
        axes.set_xticks([0, 0.25, 0.5, 0.75, 1.0])
        from matplotlib.ticker import PercentFormatter

        axes.xaxis.set_major_formatter(PercentFormatter(1.0))
        axes.grid(axis="y", visible=False)
        _titles(
            figure,
            axes,
            STRATUM_TITLE,
            "Every question here should be refused; whiskers: 95% interval",
        )
        axes.set_xlabel("Share of the stratum's questions")
        figure.legend(loc="outside lower center", ncols=2)
    return figure


def stratum_bars_png(rows: pl.DataFrame) -> bytes:
    """The per-stratum bars as PNG bytes (see ``stratum_bars_figure``)."""
    return figure_png(stratum_bars_figure(rows))


def png_data_uri(png: bytes) -> str:
    """A ``data:image/png;base64,...`` URI of PNG bytes (checked by their signature)."""
    if not png.startswith(PNG_SIGNATURE):
        raise ValueError("not PNG bytes: the PNG signature is missing")
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def markdown_image(alt: str, png: bytes) -> str:
    """A markdown image of the PNG inlined as a data URI (the Dagster UI shows these)."""
    safe_alt = alt.replace("\\", "\\\\").replace("[", "\\[").replace("]", "\\]")
    return f"![{safe_alt}]({png_data_uri(png)})"
