"""The ``rag-eval`` command line: what is not an asset materialization in the UI.

- ``rag-eval nightly [--suite S] [--partition DATE] [--config RUN.yaml]``: run ``nightly_eval`` in
  the project's Dagster instance (the one ``make ui`` shows), a line per finished step, then the
  summary and the comparison guard;
- ``rag-eval rebaseline --partition DATE --reason WHY``: a night tagged for re-baselining;
- ``rag-eval accept-baseline EVAL_RUN_ID --reason WHY``: a recorded baseline decision;
- ``rag-eval history [--suite S] [--metric M]``, ``rag-eval compare RUN_A RUN_B``,
  ``rag-eval summary [EVAL_RUN_ID]``, ``rag-eval suites`` (the good suites, then an ``error:``
  line for each bad suite file, and status 2 if there is one), ``rag-eval sql QUERY [--csv]``
  (read-only SQL on the published warehouse);
- ``rag-eval freeze SNAPSHOT_DIR``: write a snapshot's manifest digest;
- ``rag-eval import trec|beir|squad ... --suite NAME``: a public collection as a suite of its own;
- ``rag-eval export-run EVAL_RUN_ID FILE`` and ``rag-eval evaluate-run QRELS RUN``: TREC files.

Every bad argument or input is one ``error:`` line on stderr and exit status 2, also when it
fails a step of a night (a snapshot, golden set, trace or label file that cannot be used); a run
that fails on its system, judge or store, or on a release gate, exits 1; one interrupted by
SIGINT or SIGTERM exits 130 or 143.
"""

import argparse
import os
import re
import sys

from rag_eval_pipeline.cli import data, judge_plan, nightly, runs, serve
from rag_eval_pipeline.lib.errors import RagEvalError


class Parser(argparse.ArgumentParser):
    """argparse, with a usage error as one line."""

    def error(self, message: str) -> None:
        self.exit(2, f"error: {message} (see '{self.prog} --help')\n")


def plain(text: str) -> str:
    """Docstring text as ``--help`` shows it: without the reStructuredText literal markup."""
    return re.sub(r"``(.+?)``", r"\1", text)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="rag-eval", description=plain(__doc__.splitlines()[0]))
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    nightly.add_commands(commands)
    runs.add_commands(commands)
    data.add_commands(commands)
    serve.add_commands(commands)
    judge_plan.add_commands(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        status = args.handler(args)
        sys.stdout.flush()  # here, where a reader that went away is handled
        return status
    except RagEvalError as error:
        # Several bad files found in one pass (``CorpusProblems``): a line each.
        for problem in getattr(error, "problems", None) or [error]:
            print(f"error: {problem}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (``rag-eval history | head``): stop quietly, as Unix tools do;
        # stdout points at nothing so the interpreter's final flush cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
