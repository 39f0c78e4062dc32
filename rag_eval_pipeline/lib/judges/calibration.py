"""Judge calibration against human labels: agreement (Wilson interval) and Cohen's kappa.

Human labels are JSONL, one claim a line: ``{"item_id", "claim", "verdict"}`` with the verdict a
person gave (ENTAILED, CONTRADICTED or UNSUPPORTED), and optionally ``source`` (``golden``, the
default: a claim of tonight's system's answer to the golden item ``item_id``; ``production``: a
claim of the production trace whose trace id is ``item_id``), ``passage_id`` (the passage that
entails or contradicts it) and ``citation_supported`` (true when a passage the claim cites entails
it, false when not, null when it cites nothing). They are matched to the judge's verdicts on
``(source, item_id, claim)``, the claim text exactly as the judge split it; a key labelled twice
is an error. ``JUDGE_ERROR`` rows are not verdicts and match no label.
"""

import json
from pathlib import Path

import polars as pl

from rag_eval_pipeline.lib.errors import InputError
from rag_eval_pipeline.lib.inputs.golden import json_line_problem, jsonl_lines, utf8_text
from rag_eval_pipeline.lib.judges.protocol import VERDICTS
from rag_eval_pipeline.lib.metrics.statistics import wilson_interval

MIN_LABELS = 30
MIN_KAPPA = 0.6
SOURCES = ("golden", "production")
LABEL_KEY = ("source", "item_id", "claim")
LABEL_SCHEMA = {
    "source": pl.String,
    "item_id": pl.String,
    "claim": pl.String,
    "human_verdict": pl.String,
    "human_passage_id": pl.String,
    "human_citation_supported": pl.Boolean,
}


class HumanLabelError(InputError):
    """A human-label file that cannot be used; the message names the file and line."""


def load_human_labels(path: Path | str) -> pl.DataFrame:
    """Read a human-label file into ``LABEL_SCHEMA`` rows; errors name the file, the line and
    the problem."""
    path = Path(path)
    rows = []
    seen: dict[tuple, int] = {}
    for number, line in jsonl_lines(utf8_text(path, HumanLabelError)):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise HumanLabelError(f"{path}:{number}: {json_line_problem(exc)}") from None
        if not isinstance(record, dict) or not {"item_id", "claim", "verdict"} <= set(record):
            raise HumanLabelError(f"{path}:{number}: needs 'item_id', 'claim' and 'verdict'")
        if record["verdict"] not in VERDICTS:
            raise HumanLabelError(
                f"{path}:{number}: verdict {record['verdict']!r} is not one of {', '.join(VERDICTS)}"
            )
        source = record.get("source", SOURCES[0])
        if source not in SOURCES:
            raise HumanLabelError(
                f"{path}:{number}: source {source!r} is not one of {', '.join(SOURCES)}"
            )
        supported = record.get("citation_supported")
        if supported is not None and not isinstance(supported, bool):
            raise HumanLabelError(
                f"{path}:{number}: 'citation_supported' must be true, false or null"
            )
        key = (source, record["item_id"], record["claim"])
        if key in seen:
            raise HumanLabelError(
                f"{path}:{number}: claim of {source} item {record['item_id']!r} already labelled "
                f"at line {seen[key]}"
            )
        seen[key] = number
        rows.append(
            {
                "source": source,
                "item_id": record["item_id"],
                "claim": record["claim"],
                "human_verdict": record["verdict"],
                "human_passage_id": record.get("passage_id"),
                "human_citation_supported": supported,
            }
        )
    return pl.DataFrame(rows, schema=LABEL_SCHEMA)


def matched_labels(verdicts: pl.DataFrame, labels: pl.DataFrame | None) -> pl.DataFrame:
    """The judged claims that carry a human label: ``judge_verdicts`` rows (``JUDGE_ERROR`` left
    out) with the label's ``human_verdict``, ``human_passage_id`` and
    ``human_citation_supported``, joined on ``(source, item_id, claim)``."""
    judged = _with_source(verdicts.filter(pl.col("verdict").is_in(list(VERDICTS))))
    if labels is None:
        labels = pl.DataFrame(schema=LABEL_SCHEMA)
    return judged.join(_with_source(labels), on=list(LABEL_KEY), how="inner")


def _with_source(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with a ``source`` column: rows of a frame without one are golden."""
    if "source" in frame.columns:
        return frame
    return frame.with_columns(pl.lit(SOURCES[0]).alias("source"))


def cohen_kappa(first: list[str], second: list[str]) -> float | None:
    """Cohen's kappa = (p_o - p_e) / (1 - p_e), p_e from each rater's label frequencies.

    ``None`` when undefined (no pairs, or both raters used one and the same label throughout).
    """
    n = len(first)
    if n == 0 or n != len(second):
        return None
    observed = sum(a == b for a, b in zip(first, second, strict=True)) / n
    labels = set(first) | set(second)
    expected = sum((first.count(c) / n) * (second.count(c) / n) for c in labels)
    if expected == 1:
        return None
    return (observed - expected) / (1 - expected)


def calibrate(
    verdicts: pl.DataFrame,
    labels: pl.DataFrame | None,
    *,
    judge_id: str,
    min_labels: int = MIN_LABELS,
    min_kappa: float = MIN_KAPPA,
) -> dict:
    """One ``judge_calibration`` row: n matched claims (golden and production labels together),
    agreement on the three verdicts, its Wilson interval, Cohen's kappa, and whether the judge
    counts as calibrated (at least ``min_labels`` matched claims and kappa at least
    ``min_kappa``), with the reason."""
    if labels is None or not labels.height:
        return {
            "judge_id": judge_id,
            "n": 0,
            "agreement": None,
            "ci_low": None,
            "ci_high": None,
            "kappa": None,
            "calibrated": False,
            "reason": "judge not calibrated: no human labels",
        }
    matched = matched_labels(verdicts, labels)
    n = matched.height
    agree = int((matched["verdict"] == matched["human_verdict"]).sum()) if n else 0
    low, high = wilson_interval(agree, n)
    kappa = cohen_kappa(matched["verdict"].to_list(), matched["human_verdict"].to_list())
    if n < min_labels:
        calibrated, reason = (
            False,
            f"judge not calibrated: {n} labelled claims matched, need {min_labels}",
        )
    elif kappa is None or kappa < min_kappa:
        shown = "undefined" if kappa is None else f"{kappa:.3f}"
        calibrated, reason = False, f"judge not calibrated: kappa {shown} below {min_kappa}"
    else:
        calibrated, reason = True, f"kappa {kappa:.3f} >= {min_kappa} on {n} claims"
    return {
        "judge_id": judge_id,
        "n": n,
        "agreement": agree / n if n else None,
        "ci_low": low,
        "ci_high": high,
        "kappa": kappa,
        "calibrated": calibrated,
        "reason": reason,
    }
