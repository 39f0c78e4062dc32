"""A logger that prints one line per finished step with its time, for the command line.

Attached to a run by naming it in the run configuration (``loggers: {step_progress: {}}``), as
``rag-eval nightly`` does; the UI and the daemon keep Dagster's own console logger.
"""

import logging
import sys

import dagster as dg

STEP_EVENTS = ("STEP_SUCCESS", "STEP_FAILURE")


def step_label(step_key: str) -> str:
    """``retrieval_run.retrieve_shard[shard_0003]`` -> ``retrieval_run: retrieve_shard[shard_0003]``."""
    asset, _, op = step_key.partition(".")
    return f"{asset}: {op}" if op else asset


class StepProgressHandler(logging.Handler):
    """Prints ``  <step>  <seconds> s`` on each finished step, ``FAILED`` on a failed one."""

    def emit(self, record: logging.LogRecord) -> None:
        meta = record.__dict__.get("dagster_meta") or {}
        event = meta.get("dagster_event")
        if event is None or event.event_type_value not in STEP_EVENTS:
            return
        # One write per line: a step's event may be logged from another thread while the
        # command prints its own lines, and ``print`` writes the line and its end apart.
        sys.stderr.write(progress_line(event) + "\n")
        sys.stderr.flush()


def progress_line(event: dg.DagsterEvent) -> str:
    """The line of a finished step (``STEP_SUCCESS`` with its time, or ``STEP_FAILURE``)."""
    step = step_label(event.step_key)
    if event.event_type_value == "STEP_SUCCESS":
        seconds = event.event_specific_data.duration_ms / 1000
        return f"  {step:<34} {seconds:6.2f} s"
    return f"  {step:<34} FAILED"


@dg.logger(description="One line per finished step with its time, on stderr.")
def step_progress(init_context: dg.InitLoggerContext) -> logging.Logger:
    logger = logging.Logger("rag_eval.step_progress", level=logging.DEBUG)
    logger.addHandler(StepProgressHandler())
    return logger


LOGGERS = {"console": dg.colored_console_logger, "step_progress": step_progress}
