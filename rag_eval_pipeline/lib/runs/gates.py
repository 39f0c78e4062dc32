"""Release gates: thresholds on metric bounds, read from a versioned YAML file.

A gate names a metric row (table, scope, scope value, metric), the statistic it tests (the
value, or an interval bound: ``ci_low`` for "at least", ``ci_high`` for "at most", so a gate
passes only when the evidence is strong enough), an operator and a threshold. A gate that rests
on judge verdicts (``needs_calibrated_judge``) does not pass while the judge is not calibrated:
it reports "judge not calibrated" instead. A gate whose metric the run does not have (a golden set
without that stratum) is "not assessed", a warning rather than a failure. The
``no_significant_regression`` gate is evaluated by
``run_comparison`` against the baseline.
"""

import re
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import yaml

from rag_eval_pipeline.lib.errors import ConfigError

OPERATORS = {">=": lambda a, b: a >= b, "<=": lambda a, b: a <= b}
STATISTICS = ("value", "ci_low", "ci_high")
TABLES = ("retrieval_metrics", "generation_metrics")
NAME = re.compile(r"^[a-z][a-z0-9_]*$")
REGRESSION_GATE = "no_significant_regression"

PASSED = "passed"
FAILED = "failed"
NOT_CALIBRATED = "judge not calibrated"
MISSING = "metric missing"


class GateFileError(ConfigError):
    """A gates file that cannot be used; the message names the file, the gate and the field."""


@dataclass(frozen=True)
class Gate:
    name: str
    description: str
    table: str = ""
    scope: str = "overall"
    scope_value: str = "answerable"
    metric: str = ""
    statistic: str = "value"
    op: str = ">="
    threshold: float = 0.0
    needs_calibrated_judge: bool = False
    alpha: float = 0.05


@dataclass(frozen=True)
class GateResult:
    gate: Gate
    status: str
    observed: float | None
    margin: float | None
    message: str

    @property
    def passed(self) -> bool:
        return self.status == PASSED


@dataclass(frozen=True)
class GateSet:
    """A loaded gates file: where it is, its version and its gates."""

    path: Path
    version: int
    gates: tuple[Gate, ...]

    @property
    def metric_gates(self) -> list[Gate]:
        """The gates checked on ``eval_summary`` (all but the regression gate)."""
        return [gate for gate in self.gates if gate.name != REGRESSION_GATE]

    @property
    def regression_alpha(self) -> float:
        """The significance level of the regression gate (0.05 when the file has none)."""
        return next((g.alpha for g in self.gates if g.name == REGRESSION_GATE), 0.05)


def read_gates(path: Path | str) -> GateSet:
    """The gates file at ``path`` (``load_gates``) as a ``GateSet``."""
    version, gates = load_gates(path)
    return GateSet(Path(path), version, tuple(gates))


def load_gates(path: Path | str) -> tuple[int, list[Gate]]:
    """The gates file's version and gates, checked field by field."""
    path = Path(path)
    if not path.is_file():
        raise GateFileError(f"{path}: gates file does not exist")
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise GateFileError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(document, dict) or not isinstance(document.get("gates"), list):
        raise GateFileError(f"{path}: expected a mapping with 'version' and a list 'gates'")
    version = document.get("version")
    if not isinstance(version, int):
        raise GateFileError(f"{path}: 'version' must be an integer")
    gates = []
    names = set()
    for index, entry in enumerate(document["gates"], start=1):
        where = f"{path}: gate {index}"
        if not isinstance(entry, dict) or not NAME.match(str(entry.get("name", ""))):
            raise GateFileError(f"{where}: needs a 'name' of lowercase letters, digits and _")
        where = f"{path}: gate {index} ({entry['name']})"
        if entry["name"] in names:
            raise GateFileError(f"{where}: name used twice")
        names.add(entry["name"])
        unknown = set(entry) - set(Gate.__dataclass_fields__)
        if unknown:
            raise GateFileError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
        gate = Gate(**{"description": "", **entry})
        if gate.name != REGRESSION_GATE:
            if gate.table not in TABLES:
                raise GateFileError(f"{where}: 'table' must be one of {', '.join(TABLES)}")
            if not gate.metric:
                raise GateFileError(f"{where}: needs a 'metric'")
            if gate.statistic not in STATISTICS:
                raise GateFileError(f"{where}: 'statistic' must be one of {', '.join(STATISTICS)}")
            if gate.op not in OPERATORS:
                raise GateFileError(f"{where}: 'op' must be >= or <=")
        gates.append(gate)
    return version, gates


def describe(gate: Gate) -> str:
    if gate.name == REGRESSION_GATE:
        return f"no metric significantly worse than the baseline (p < {gate.alpha})"
    bound = {"value": "value", "ci_low": "95% lower bound", "ci_high": "95% upper bound"}
    where = f"{gate.scope}={gate.scope_value}"
    return f"{gate.metric} {bound[gate.statistic]} ({where}) {gate.op} {gate.threshold:g}"


def evaluate_gates(
    gates: list[Gate], metrics: pl.DataFrame, *, judge_calibrated: bool, judge_reason: str = ""
) -> list[GateResult]:
    """Evaluate metric gates against rows ``table, scope, scope_value, metric, value, ci_low,
    ci_high``. The margin is how far the observed statistic is on the passing side (negative:
    short by that much)."""
    results = []
    for gate in gates:
        if gate.name == REGRESSION_GATE:
            continue
        rows = metrics.filter(
            (pl.col("table") == gate.table)
            & (pl.col("scope") == gate.scope)
            & (pl.col("scope_value") == gate.scope_value)
            & (pl.col("metric") == gate.metric)
        )
        observed = rows[gate.statistic][0] if rows.height else None
        if gate.needs_calibrated_judge and not judge_calibrated:
            results.append(
                GateResult(
                    gate,
                    NOT_CALIBRATED,
                    observed,
                    None,
                    f"{gate.name}: {NOT_CALIBRATED} ({judge_reason}); {describe(gate)} not assessed",
                )
            )
            continue
        if observed is None:
            results.append(
                GateResult(
                    gate,
                    MISSING,
                    None,
                    None,
                    f"{gate.name}: {gate.metric} has no value in this run",
                )
            )
            continue
        margin = observed - gate.threshold if gate.op == ">=" else gate.threshold - observed
        passed = OPERATORS[gate.op](observed, gate.threshold)
        verdict = "passed" if passed else f"failed, short by {-margin:.4f}"
        results.append(
            GateResult(
                gate,
                PASSED if passed else FAILED,
                observed,
                margin,
                f"{gate.name}: {describe(gate)}: observed {observed:.4f}, {verdict}",
            )
        )
    return results
