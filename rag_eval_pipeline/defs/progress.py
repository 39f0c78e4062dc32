"""A logger that prints one line per finished step with its time, for the command line.

Attached to a run by naming it in the run configuration (``loggers: {step_progress: {}}``), as
``rag-eval nightly`` does; the UI and the daemon keep Dagster's own console logger.
"""

import logging
import sys

import dagster as dg

STEP_EVENTS = ("STEP_SUCCESS", "STEP_FAILURE")


class StepProgressHandler(logging.Handler):
    """Prints ``  <step>  <seconds> s`` on each finished step, ``FAILED`` on a failed one."""

    def emit(self, record: logging.LogRecord) -> None:
        meta = record.__dict__.get("dagster_meta") or {}
        event = meta.get("dagster_event")
        if event is None or event.event_type_value not in STEP_EVENTS:
            return
        if event.event_type_value == "STEP_SUCCESS":
            seconds = event.event_specific_data.duration_ms / 1000
            line = f"  {event.step_key:<22} {seconds:6.2f} s"
        else:
            line = f"  {event.step_key:<22} FAILED"
        print(line, file=sys.stderr, flush=True)


@dg.logger(description="One line per finished step with its time, on stderr.")
def step_progress(init_context: dg.InitLoggerContext) -> logging.Logger:
    logger = logging.Logger("rag_eval.step_progress", level=logging.DEBUG)
    logger.addHandler(StepProgressHandler())
    return logger


LOGGERS = {"console": dg.colored_console_logger, "step_progress": step_progress}
