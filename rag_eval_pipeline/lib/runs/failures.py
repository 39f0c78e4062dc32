"""Why a Dagster run's steps failed, as a person reads it, for ``rag-eval nightly`` and the
failure alerts alike (the daemon's alert says what the command line says)."""

import importlib
import re
from collections.abc import Iterable, Iterator

from rag_eval_pipeline.lib.errors import InputError

CHECK_FAILURE = "DagsterAssetCheckFailedError"
INTERRUPTED = "DagsterExecutionInterruptedError"
EXCEPTION_CLASS = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*: ")
PACKAGE_FRAME = re.compile(r'File "[^"]*[/\\]rag_eval_pipeline[/\\]')
# Where the ``InputError`` classes are defined.
INPUT_ERROR_MODULES = (
    "rag_eval_pipeline.lib.inputs.corpus",
    "rag_eval_pipeline.lib.inputs.formats",
    "rag_eval_pipeline.lib.inputs.golden",
    "rag_eval_pipeline.lib.inputs.suites",
    "rag_eval_pipeline.lib.inputs.traces",
    "rag_eval_pipeline.lib.judges.calibration",
    "rag_eval_pipeline.lib.runs.gates",
)


def step_name(step_key: str) -> str:
    """A step as a person reads it: the asset, and the shard of a sharded asset's step
    (``retrieval_run.retrieve_shard[shard_0003]`` -> ``retrieval_run (shard_0003)``)."""
    asset, _, op = step_key.partition(".")
    shard = op[op.index("[") + 1 : -1] if "[" in op else ""
    return f"{asset} ({shard})" if shard else asset


def failed_steps(events: Iterable) -> Iterator[tuple]:
    """``(event, error)`` of each step failure among a run's events, but a failed blocking
    check's (left to the checks)."""
    for event in events:
        if not event.is_step_failure:
            continue
        error = event.event_specific_data.error
        if error is None or CHECK_FAILURE not in (error.cls_name or ""):
            yield event, error


def step_failure_lines(events: Iterable, interrupted_by: str = "SIGINT or SIGTERM") -> list[str]:
    """One line per failed step of a run's events (``step golden_set failed: <file>: <what is
    wrong>``), the error's own message without its class; a failed blocking check is left to
    the checks, and a step stopped by a signal says ``interrupted by <interrupted_by>``."""
    lines = []
    for event, error in failed_steps(events):
        if error is not None and INTERRUPTED in (error.cls_name or ""):
            lines.append(
                f"step {step_name(event.step_key)} failed: interrupted by {interrupted_by}"
            )
            continue
        cause = error.cause if error is not None and error.cause is not None else error
        text = EXCEPTION_CLASS.sub(
            "", (cause.message if cause is not None else "").strip(), count=1
        )
        lines.append(f"step {step_name(event.step_key)} failed: {' '.join(text.split())}")
    return lines


def _input_error_names() -> frozenset[str]:
    """The class names of every ``InputError`` (a step's failure keeps only its error's class
    name), with the modules that define them imported, so none is missed."""
    for module in INPUT_ERROR_MODULES:
        importlib.import_module(module)
    names, pending = set(), [InputError]
    while pending:
        cls = pending.pop()
        names.add(cls.__name__)
        pending.extend(cls.__subclasses__())
    return frozenset(names)


def _raised_by_this_package(error) -> bool:
    """Whether the error was raised in this package's code (its traceback's last frame): only
    the class name is kept, and another library may name a class alike."""
    stack = error.stack or []
    return bool(stack) and PACKAGE_FRAME.search(stack[-1]) is not None


def failed_on_input(events: Iterable) -> bool:
    """Whether every failed step among a run's events failed on bad input (an ``InputError``: a
    snapshot, golden set, trace or label file, or a setting that cannot be used), at any depth
    of the error's causes, rather than on the system, the judge, the store or a bug."""
    names = _input_error_names()

    def on_input(error) -> bool:
        while error is not None:
            if error.cls_name in names and _raised_by_this_package(error):
                return True
            error = error.cause
        return False

    errors = [error for _, error in failed_steps(events)]
    return bool(errors) and all(on_input(error) for error in errors)
