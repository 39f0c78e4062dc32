"""Wall time of ``make nightly`` after installation, and where the time goes.

Runs ``make nightly`` a few times against a temporary Dagster home and warehouse, then one
``rag-eval nightly --timings`` run for the breakdown (imports and definitions, each asset step).
As a reference measured in the same session it times a bare ``python -c "import dagster"``, so
the ratio (nightly / Dagster import) stays comparable on a noisy machine. Goal: under 20 s.

    .venv/bin/python bench/bench_nightly.py [--repeat 3] [--baseline DIR]

``--baseline DIR`` also times ``rag-eval nightly`` with the package of another checkout (for
instance ``git archive HEAD | tar -x -C DIR``) first on ``PYTHONPATH``, interleaved with this
checkout's runs in the same session, and prints the ratio of the two.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def timed(command: list[str], env: dict) -> tuple[float, subprocess.CompletedProcess]:
    started = time.perf_counter()
    completed = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if completed.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{completed.stderr[-2000:]}")
    return elapsed, completed


def compare(args: argparse.Namespace, env: dict, scratch: Path) -> None:
    """``rag-eval nightly`` of this checkout and of ``args.baseline``, interleaved, each in a
    Dagster home and warehouse of its own."""
    environments = {}
    for label, extra in (("baseline", {"PYTHONPATH": str(args.baseline)}), ("this checkout", {})):
        home = scratch / f"home-{label.replace(' ', '-')}"
        home.mkdir()
        (home / "dagster.yaml").write_text((ROOT / "dagster.yaml").read_text())
        warehouse = scratch / f"{home.name}.duckdb"
        environments[label] = {
            **env,
            **extra,
            "DAGSTER_HOME": str(home),
            "RAG_EVAL_WAREHOUSE": str(warehouse),
        }
    times: dict[str, list[float]] = {label: [] for label in environments}
    command = [str(BIN / "rag-eval"), "nightly", "--no-summary"]
    for _ in range(args.repeat):
        for label, environment in environments.items():
            times[label].append(timed(command, environment)[0])
    medians = {label: statistics.median(values) for label, values in times.items()}
    print(
        f"rag-eval nightly, median of {args.repeat} interleaved runs: baseline "
        f"{medians['baseline']:.2f} s, this checkout {medians['this checkout']:.2f} s "
        f"(this / baseline {medians['this checkout'] / medians['baseline']:.2f}x)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--baseline", type=Path, help="another checkout to compare with")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        home = Path(scratch) / "dagster_home"
        home.mkdir()
        (home / "dagster.yaml").write_text((ROOT / "dagster.yaml").read_text())
        env = {
            **os.environ,
            "DAGSTER_HOME": str(home),
            "RAG_EVAL_WAREHOUSE": str(Path(scratch) / "rag_eval.duckdb"),
        }
        reference = [
            timed([str(BIN / "python"), "-c", "import dagster"], env)[0] for _ in range(args.repeat)
        ]
        nightly = [
            timed(["make", "--no-print-directory", "nightly", "DAGSTER_HOME=" + str(home)], env)[0]
            for _ in range(args.repeat)
        ]
        _, breakdown = timed([str(BIN / "rag-eval"), "nightly", "--timings", "--no-summary"], env)
        if args.baseline:
            compare(args, env, Path(scratch))
    median_nightly = statistics.median(nightly)
    median_reference = statistics.median(reference)
    print(
        f"make nightly: median {median_nightly:.2f} s over {args.repeat} runs "
        f"({', '.join(f'{t:.2f}' for t in nightly)}); goal < 20 s"
    )
    print(f"reference, python -c 'import dagster': median {median_reference:.2f} s")
    print(f"ratio nightly / dagster import: {median_nightly / median_reference:.1f}x")
    print("where the time goes (one rag-eval nightly --timings run):")
    for line in breakdown.stderr.splitlines():
        if line.startswith("timing:"):
            print("  " + line.removeprefix("timing: "))


if __name__ == "__main__":
    main()
