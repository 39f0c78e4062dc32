"""``rag-eval serve-reference``: the reference system over the system protocol, on 127.0.0.1.

Serves a suite's snapshot (``--snapshot``, else the suite's, else the newest) until SIGTERM or
SIGINT, then stops cleanly. The first line on stdout is the URL, e.g.
``serving http://127.0.0.1:8765 (reference-bm25 511f0665c3c3, snapshot 2026-11-01, corpus
4b978a8e47bf...)``, so a script can read the port it picked with ``--port 0``. stderr then shows
the ``make nightly`` that evaluates it: the suite, and the night whose snapshot is the one served
when tonight's is another (a run refuses a service serving another corpus state than its night's).
"""

import argparse
import datetime as dt
import os
import shlex
import signal
import sys
import threading
from pathlib import Path
from zoneinfo import ZoneInfo

from rag_eval_pipeline.cli import project
from rag_eval_pipeline.lib.errors import ConfigError, RagEvalError
from rag_eval_pipeline.lib.inputs.suites import (
    DEFAULT_SUITE,
    Suite,
    check_suite_name,
    load_suite,
)


def evaluate_command(suite: Suite, folder: Path, url: str, today: dt.date) -> str:
    """The ``make nightly`` that evaluates the service serving ``folder`` of ``suite``: tonight
    when tonight's snapshot is the one served, else the night of the served snapshot's date
    (``PARTITION``); a note instead when no night of the suite evaluates it."""
    from rag_eval_pipeline.lib.inputs.corpus import choose_snapshot

    def evaluated_on(night: dt.date) -> bool:
        try:
            return choose_snapshot(suite.corpus_root, night, suite.snapshot).name == folder.name
        except RagEvalError:  # no snapshot on or before the night, a pinned one missing
            return False

    registry = os.environ.get("RAG_EVAL_SUITES")
    variables = [
        "RAG_EVAL_SYSTEM=http",
        f"RAG_EVAL_SYSTEM_URL={shlex.quote(url)}",
        *([f"RAG_EVAL_SUITES={shlex.quote(registry)}"] if registry else []),
    ]
    command = f"{' '.join(variables)} make nightly SUITE={suite.name}"
    if evaluated_on(today):
        return command
    try:
        night = dt.date.fromisoformat(folder.name)
    except ValueError:
        night = None
    if night is not None and evaluated_on(night):
        return f"{command} PARTITION={night.isoformat()}"
    return (
        f"{command}  (note: no night of suite {suite.name} evaluates snapshot {folder.name}; "
        f"the suite's snapshot is {suite.snapshot})"
    )


def command_serve_reference(args: argparse.Namespace) -> int:
    from rag_eval_pipeline.lib.systems.service import ReferenceService, suite_reference_answers

    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port must be from 0 to 65535, got {args.port}")
    if args.latency_ms < 0:
        raise ConfigError(f"--latency-ms must be 0 or more, got {args.latency_ms}")
    deployment = project.deployment()
    suite = load_suite(deployment.suites, check_suite_name(args.suite, "--suite"))
    today = dt.datetime.now(ZoneInfo(deployment.timezone)).date()
    answers, folder = suite_reference_answers(suite, args.snapshot, context_k=args.context_k)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda number, frame: stop.set())
    try:
        service = ReferenceService(answers, port=args.port, latency_ms=args.latency_ms).start()
    except OSError as error:
        raise ConfigError(f"cannot listen on 127.0.0.1:{args.port}: {error.strerror}") from None
    print(
        f"serving {service.url} ({answers.system_version}, snapshot {folder.name}, "
        f"corpus {answers.corpus_digest})",
        flush=True,
    )
    print(
        f"  evaluate it: {evaluate_command(suite, folder, service.url, today)}",
        file=sys.stderr,
        flush=True,
    )
    while not stop.wait(0.2):
        pass
    service.stop()
    print(f"stopped after {service.request_count} requests", file=sys.stderr, flush=True)
    return 0


def add_commands(commands) -> None:
    serve = commands.add_parser(
        "serve-reference", help="serve the reference system over the system protocol"
    )
    serve.add_argument(
        "--suite",
        default=DEFAULT_SUITE,
        help=f"suite whose corpus is served; default {DEFAULT_SUITE}",
    )
    serve.add_argument("--snapshot", help="snapshot folder name (default: the suite's, or newest)")
    serve.add_argument("--port", type=int, default=8765, help="0 picks a free port; default 8765")
    serve.add_argument(
        "--latency-ms", type=float, default=0.0, help="delay added to every query, in ms; default 0"
    )
    serve.add_argument(
        "--context-k", type=int, default=5, help="passages in the context sent; default 5"
    )
    serve.set_defaults(handler=command_serve_reference)
