"""The benchmarks' processes with their compiled modules kept, as an installed environment has.

This machine's sessions set ``PYTHONDONTWRITEBYTECODE=1``, so every process a benchmark starts
would compile each module changed since the last compile (seconds of start-up an installed
environment never pays). By default the benchmarks give their processes a bytecode cache of
their own under ``<work>/pycache`` (``PYTHONPYCACHEPREFIX``), filled once before anything is
timed; ``--no-bytecode-cache`` keeps the environment as it is.
"""

import argparse
import subprocess
import sys
from collections.abc import MutableMapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def add_bytecode_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-bytecode-cache",
        action="store_true",
        help="run the processes with the environment as it is (bench/compiled_modules.py)",
    )


def keep_compiled_modules(env: MutableMapping[str, str], work: Path) -> None:
    """Set ``env`` (the environment the timed processes get: ``os.environ`` or a copy) to keep
    compiled modules under ``<work>/pycache``, and fill that cache outside the timed runs: the
    project compiled whole, and the libraries compiled by importing the code location and
    starting ``rag-eval`` once."""
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
    warm = dict(env)
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(ROOT / "rag_eval_pipeline")], env=warm
    )
    subprocess.run([sys.executable, "-c", "import rag_eval_pipeline.definitions"], env=warm)
    subprocess.run([str(BIN / "rag-eval"), "--help"], env=warm, capture_output=True)
