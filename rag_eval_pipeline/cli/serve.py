"""``rag-eval serve-reference``: the reference system over the system protocol, on 127.0.0.1.

Serves a suite's snapshot (``--snapshot``, else the suite's, else the newest) until SIGTERM or
SIGINT, then stops cleanly. The first line on stdout is the URL, e.g.
``serving http://127.0.0.1:8765 (reference-bm25 511f0665c3c3, snapshot 2026-11-01, corpus
4b978a8e47bf...)``, so a script can read the port it picked with ``--port 0``.
"""

import argparse
import signal
import sys
import threading

from rag_eval_pipeline.cli import project
from rag_eval_pipeline.lib.errors import ConfigError
from rag_eval_pipeline.lib.inputs.suites import DEFAULT_SUITE, check_suite_name, load_suite


def command_serve_reference(args: argparse.Namespace) -> int:
    from rag_eval_pipeline.lib.systems.service import ReferenceService, suite_reference_answers

    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port must be from 0 to 65535, got {args.port}")
    if args.latency_ms < 0:
        raise ConfigError(f"--latency-ms must be 0 or more, got {args.latency_ms}")
    suite = load_suite(project.deployment().suites, check_suite_name(args.suite, "--suite"))
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
        f"  evaluate it: RAG_EVAL_SYSTEM=http RAG_EVAL_SYSTEM_URL={service.url} make nightly",
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
    serve.add_argument("--suite", default=DEFAULT_SUITE, help=f"default {DEFAULT_SUITE}")
    serve.add_argument("--snapshot", help="snapshot folder name (default: the suite's, or newest)")
    serve.add_argument("--port", type=int, default=8765, help="0 picks a free port; default 8765")
    serve.add_argument(
        "--latency-ms", type=float, default=0.0, help="delay added to every query, in ms"
    )
    serve.add_argument(
        "--context-k", type=int, default=5, help="passages in the context sent; default 5"
    )
    serve.set_defaults(handler=command_serve_reference)
