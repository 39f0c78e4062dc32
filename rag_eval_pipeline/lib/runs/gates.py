"""Release gates: thresholds on metric bounds, read from a versioned YAML file.

A gate names a metric row (table, scope, scope value, metric), the statistic it tests (the
value, or an interval bound: ``ci_low`` for "at least", ``ci_high`` for "at most", so a gate
passes only when the evidence is strong enough), an operator and a threshold. A gate that rests
on judge verdicts (``needs_calibrated_judge``) rests on the prediction-powered (PPI++) estimate of
the same rate once at least ``min_labels_for_ppi`` (default 30) human labels matched in its scope
(``judge_rate_estimates``, ``lib.judges.estimates``): the gate's statistic is then read from the
PPI row (``ci_low`` its lower, ``ci_high`` its upper 95% bound), which corrects the judge's bias
with the labels, so a gate can pass (or fail) on an uncalibrated judge, and its message says how
many labels it rests on. With fewer labels, or no PPI interval, it does not pass while the judge
is not calibrated: it reports "judge not calibrated" instead. A gate whose metric the run does not have (a golden set
without that stratum) is "not assessed", a warning rather than a failure. The
``no_significant_regression`` gate is evaluated by
``run_comparison`` against the baseline.

The file is checked when it is read, before any step runs: each field of its type (``threshold``
and ``alpha`` numbers, never a bool; ``needs_calibrated_judge`` true or false), and each gate's
scope, scope value and metric one that some run's table holds (``CATALOGUE``), so a misspelt
metric is refused rather than never enforced. Strata and languages are a golden set's own, so a
``stratum`` or ``language`` scope value is not checked. A retrieval measure at a cut-off is
checked against the run's own ``cutoffs`` before the night starts (``check_cutoffs``, by
``rag-eval nightly``, and where the run begins for a night the schedule or the UI launched): a
cut-off the run does not compute would leave the gate "not assessed" every night.
"""

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import yaml

from rag_eval_pipeline.lib.errors import ConfigError
from rag_eval_pipeline.lib.judges.calibration import SOURCES
from rag_eval_pipeline.lib.judges.estimates import RATES
from rag_eval_pipeline.lib.judges.stability import UNSTABLE_RATE
from rag_eval_pipeline.lib.metrics import generation, retrieval

OPERATORS = {">=": lambda a, b: a >= b, "<=": lambda a, b: a <= b}
STATISTICS = ("value", "ci_low", "ci_high")
TABLES = ("retrieval_metrics", "generation_metrics", "judge_rate_estimates")
NAME = re.compile(r"^[a-z][a-z0-9_]*$")
REGRESSION_GATE = "no_significant_regression"
DEFAULT_MAX_JUDGE_ERROR_SHARE = 0.05
DEFAULT_MIN_LABELS_FOR_PPI = 30

PASSED = "passed"
FAILED = "failed"
NOT_CALIBRATED = "judge not calibrated"
MISSING = "metric missing"


class GateFileError(ConfigError):
    """A gates file that cannot be used; the message names the file, the gate and the field."""


@dataclass(frozen=True)
class MetricScope:
    """A scope of a metric table: the scope values it takes (``None``: the golden set's strata
    or languages, known only once a run has its golden set) and whether it holds a metric."""

    values: tuple[str, ...] | None
    holds: Callable[[str], bool]
    known: str


def _one_of(names: Iterable[str]) -> tuple[Callable[[str], bool], str]:
    names = tuple(names)
    return names.__contains__, ", ".join(names)


_RETRIEVAL = (retrieval.is_run_measure, retrieval.run_measure_names())
_GENERATION = _one_of(generation.REGISTRY)
_JUDGE_RATES = _one_of((*RATES, UNSTABLE_RATE))
# What each metric table can hold, by scope: the rows ``retrieval.retrieval_tables``,
# ``generation.generation_tables`` and ``judge_trust_estimates`` write. A gate naming anything
# else would never find its row and never be enforced, so the file is refused instead.
CATALOGUE: dict[str, dict[str, MetricScope]] = {
    "retrieval_metrics": {
        "overall": MetricScope(("answerable",), *_RETRIEVAL),
        "stratum": MetricScope(None, *_RETRIEVAL),
        "language": MetricScope(None, *_RETRIEVAL),
    },
    "generation_metrics": {
        "overall": MetricScope(
            ("answerable", "no_answer", "all_items"),
            *_one_of((*generation.REGISTRY, *generation.SQUAD_MEASURES)),
        ),
        "stratum": MetricScope(None, *_GENERATION),
        "language": MetricScope(None, *_GENERATION),
        "guardrail": MetricScope(("all_items",), *_one_of(generation.GUARDRAIL_METRICS)),
        "operations": MetricScope(("all_items",), *_one_of(generation.OPERATIONS)),
    },
    "judge_rate_estimates": {
        "overall": MetricScope(("answerable", "all_judged"), *_JUDGE_RATES),
        "source": MetricScope(SOURCES, *_JUDGE_RATES),
    },
}


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
    max_judge_error_share: float = DEFAULT_MAX_JUDGE_ERROR_SHARE
    min_labels_for_ppi: int = DEFAULT_MIN_LABELS_FOR_PPI

    @property
    def metric_gates(self) -> list[Gate]:
        """The gates checked on ``eval_summary`` (all but the regression gate)."""
        return [gate for gate in self.gates if gate.name != REGRESSION_GATE]

    @property
    def regression_alpha(self) -> float:
        """The significance level of the regression gate (0.05 when the file has none)."""
        return next((g.alpha for g in self.gates if g.name == REGRESSION_GATE), 0.05)


def read_gates(path: Path | str) -> GateSet:
    """The gates file at ``path``: its version, gates and the judge error bound.

    ``max_judge_error_share`` (optional, default 0.05): when more than this share of the claims
    judged in a run are ``JUDGE_ERROR``, every gate that rests on the judge fails, saying so.
    ``min_labels_for_ppi`` (optional, default 30): the human labels a judge gate's scope needs
    before the gate rests on the prediction-powered bound (module docstring).
    """
    version, gates, document = _parse(Path(path))
    bound = document.get("max_judge_error_share", DEFAULT_MAX_JUDGE_ERROR_SHARE)
    if isinstance(bound, bool) or not isinstance(bound, int | float) or not 0 <= bound <= 1:
        raise GateFileError(f"{path}: 'max_judge_error_share' must be a number from 0 to 1")
    labels = document.get("min_labels_for_ppi", DEFAULT_MIN_LABELS_FOR_PPI)
    if isinstance(labels, bool) or not isinstance(labels, int) or labels < 2:
        raise GateFileError(f"{path}: 'min_labels_for_ppi' must be a whole number from 2")
    return GateSet(Path(path), version, tuple(gates), float(bound), labels)


def load_gates(path: Path | str) -> tuple[int, list[Gate]]:
    """The gates file's version and gates, checked field by field."""
    version, gates, _ = _parse(Path(path))
    return version, gates


def _parse(path: Path) -> tuple[int, list[Gate], dict]:
    if not path.is_file():
        raise GateFileError(f"{path}: gates file does not exist")
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise GateFileError(f"{path}: gates file cannot be read: {exc}") from None
    except yaml.YAMLError as exc:
        raise GateFileError(f"{path}: not valid YAML: {' '.join(str(exc).split())}") from None
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
        _check_types(entry, where)
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
            problem = metric_problem(gate.table, gate.scope, gate.scope_value, gate.metric)
            if problem:
                raise GateFileError(f"{where}: {problem}")
        gates.append(gate)
    return version, gates, document


def _check_types(entry: dict, where: str) -> None:
    """Each field of a gate of the type ``Gate`` gives it: YAML reads ``threshold: high`` as a
    string and ``true`` as a bool (which Python would take for 1), ``"yes"`` as a string."""
    for field, value in entry.items():
        expected = Gate.__dataclass_fields__[field].type
        if expected is float:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise GateFileError(f"{where}: '{field}' must be a number, got {value!r}")
        elif expected is bool:
            if not isinstance(value, bool):
                raise GateFileError(f"{where}: '{field}' must be true or false, got {value!r}")
        elif not isinstance(value, str):
            raise GateFileError(f"{where}: '{field}' must be text, got {value!r}")
    alpha = entry.get("alpha", 0.05)
    if not 0 < alpha < 1:
        raise GateFileError(f"{where}: 'alpha' must be between 0 and 1, got {alpha!r}")


def metric_problem(table: str, scope: str, scope_value: str, metric: str) -> str | None:
    """What no run's ``table`` can hold of this row (``CATALOGUE``): its scope, its scope value
    or its metric; ``None`` when some run can hold it."""
    scopes = CATALOGUE[table]
    known = scopes.get(scope)
    if known is None:
        return f"'scope' {scope!r} is not a scope of {table} (scopes: {', '.join(scopes)})"
    if known.values is not None and scope_value not in known.values:
        return (
            f"'scope_value' {scope_value!r} is not a value of scope {scope} in {table} "
            f"(values: {', '.join(known.values)})"
        )
    if not known.holds(metric):
        return (
            f"'metric' {metric!r} is not a metric of {table} in scope {scope} "
            f"(metrics: {known.known})"
        )
    return None


def cutoff_problem(gate: Gate, cutoffs: Iterable[int]) -> str | None:
    """Why a run at ``cutoffs`` can never hold the gate's row: a ``retrieval_metrics`` measure
    at a cut-off the run does not compute; ``None`` for a measure without a cut-off, a cut-off
    the run computes, another table's metric or the regression gate."""
    if gate.name == REGRESSION_GATE or gate.table != "retrieval_metrics":
        return None
    match = retrieval.MEASURE_NAME.match(gate.metric)
    ks = sorted(set(cutoffs))
    if match is None or match["k"] is None or int(match["k"]) in ks:
        return None
    computed = ", ".join(str(k) for k in ks)
    return f"{gate.metric} is not computed by this run (cut-offs {computed})"


def check_cutoffs(gates: GateSet, cutoffs: Iterable[int]) -> None:
    """Refuse, before the night starts, a gate on a retrieval measure at a cut-off the run's
    settings do not compute (``cutoff_problem``), naming the file, the gate and the cut-offs."""
    cutoffs = tuple(cutoffs)
    for index, gate in enumerate(gates.gates, start=1):
        problem = cutoff_problem(gate, cutoffs)
        if problem:
            raise GateFileError(f"{gates.path}: gate {index} ({gate.name}): {problem}")


def describe(gate: Gate) -> str:
    if gate.name == REGRESSION_GATE:
        return f"no metric significantly worse than the baseline (p < {gate.alpha})"
    bound = {"value": "value", "ci_low": "95% lower bound", "ci_high": "95% upper bound"}
    where = f"{gate.scope}={gate.scope_value}"
    return f"{gate.metric} {bound[gate.statistic]} ({where}) {gate.op} {gate.threshold:g}"


def judge_error_share(metrics: pl.DataFrame) -> float | None:
    """The run's share of judged claims that are ``JUDGE_ERROR`` (answerable items), if judged."""
    rows = metrics.filter(
        (pl.col("metric") == "judge_error_rate")
        & (pl.col("scope") == "overall")
        & (pl.col("scope_value") == "answerable")
    )
    return rows["value"][0] if rows.height else None


def ppi_row(ppi: pl.DataFrame | None, gate: Gate) -> dict | None:
    """The prediction-powered estimate of the rate a judge gate tests, if the run has one."""
    if ppi is None or not ppi.height:
        return None
    rows = ppi.filter(
        (pl.col("scope") == gate.scope)
        & (pl.col("scope_value") == gate.scope_value)
        & (pl.col("metric") == gate.metric)
    )
    return rows.row(0, named=True) if rows.height else None


def _labels(row: dict) -> str:
    """How many labels a PPI estimate rests on, in its units."""
    unit = "items" if row["unit"] == "item" else "claims"
    return f"{row['n_labelled']} human-labelled {unit} of {row['n_judged']} judged"


def evaluate_gates(
    gates: list[Gate],
    metrics: pl.DataFrame,
    *,
    judge_calibrated: bool,
    judge_reason: str = "",
    max_judge_error_share: float = DEFAULT_MAX_JUDGE_ERROR_SHARE,
    ppi: pl.DataFrame | None = None,
    min_labels_for_ppi: int = DEFAULT_MIN_LABELS_FOR_PPI,
) -> list[GateResult]:
    """Evaluate metric gates against rows ``table, scope, scope_value, metric, value, ci_low,
    ci_high``. The margin is how far the observed statistic is on the passing side (negative:
    short by that much). A gate that was not measured (not assessed, or failed because the
    judge failed) has neither: the judge's own figure is not the gate's evidence there. A gate resting on the judge fails when the judge failed on more than
    ``max_judge_error_share`` of the claims; it tests the prediction-powered row of ``ppi``
    (``scope, scope_value, metric, method, unit, value, ci_low, ci_high, n_judged, n_labelled,
    reason``) when that rests on at least ``min_labels_for_ppi`` labels and has the statistic,
    and otherwise is not assessed while the judge is not calibrated."""
    errors = judge_error_share(metrics)
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
        if gate.needs_calibrated_judge and errors is not None and errors > max_judge_error_share:
            results.append(
                GateResult(
                    gate,
                    FAILED,
                    None,
                    None,
                    f"{gate.name}: the judge failed on {errors:.1%} of the claims, more than "
                    f"{max_judge_error_share:.0%} (JUDGE_ERROR: an unreachable or misbehaving "
                    f"judge); {describe(gate)} not passed",
                )
            )
            continue
        powered = ppi_row(ppi, gate) if gate.needs_calibrated_judge else None
        rests_on, reason = "", judge_reason
        if powered is not None:
            if powered["n_labelled"] < min_labels_for_ppi:
                note = (
                    f"{powered['n_labelled']} human labels matched, the prediction-powered "
                    f"bound needs {min_labels_for_ppi}"
                )
            elif powered[gate.statistic] is None:
                note = f"no prediction-powered {gate.statistic}: {powered['reason']}"
            else:
                observed = powered[gate.statistic]
                rests_on = f", prediction-powered ({powered['method']}, {_labels(powered)})"
                note = ""
            reason = f"{judge_reason}; {note}" if note else judge_reason
        if gate.needs_calibrated_judge and not judge_calibrated and not rests_on:
            results.append(
                GateResult(
                    gate,
                    NOT_CALIBRATED,
                    None,
                    None,
                    f"{gate.name}: {NOT_CALIBRATED} ({reason.removeprefix(NOT_CALIBRATED + ': ')}); "
                    f"{describe(gate)} not assessed",
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
                f"{gate.name}: {describe(gate)}{rests_on}: observed {observed:.4f}, {verdict}",
            )
        )
    return results
