"""The nightly graph on generated libraries of growing size: wall time, peak memory, each step.

Run: ``.venv/bin/python bench/bench_scale_nightly.py [--sizes 2000,20000,100000]
[--work /tmp/rag_eval_bench_scale] [--seed 7] [--no-bytecode-cache]``

For each size the library of ``bench/generate_library.py`` is generated (once; it is kept under
``--work`` for the next run) with its golden set (2,700 items per 20,000 documents, about a
quarter no-answer), registered as a suite, and ``rag-eval nightly --timings`` is run twice in a
fresh Dagster home and warehouse, with the reference system and the deterministic judge:

- first night: nothing staged (the snapshot is verified in full, its documents read from the
  parse cache the freeze left, its tables staged and loaded into the warehouse);
- second night: the same snapshot, already staged (files hashed and compared, nothing parsed).

Each night is one process, timed with its peak resident memory (GNU ``time``). A night that
does not run to its end (a step failed: exit 1 without only release gates failing) stops the
bench with its error: a night cut short after two steps would otherwise look fast and small.
Reported: wall and peak per size, every step's time, and how each grows from one size to the next (the ratio
of times against the ratio of documents). As references measured in the same run: the library's
``find | sort | xargs cat | sha256sum`` and a bare ``python -c "import dagster"``.

By default every process caches bytecode under ``<work>/pycache`` (``PYTHONPYCACHEPREFIX``),
as an installed environment would; this machine's sessions set ``PYTHONDONTWRITEBYTECODE=1``,
which makes every process compile every module again (several seconds of start-up).
``--no-bytecode-cache`` keeps the environment as it is.
"""

import argparse
import itertools
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from compiled_modules import add_bytecode_option, keep_compiled_modules

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
GOALS = {20_000: (20.0, 1024), 100_000: (90.0, 4096)}
# A step line of ``--timings``: ``  corpus_snapshot  2.66 s`` or, for a graph-backed asset,
# ``  retrieval_run: retrieve_shard[shard_0000]  121.09 s``.
STEP = re.compile(r"^\s+(\w+(?:: [\w\[\]]+)?)\s+(?:([0-9.]+) s|(FAILED))$")
STEP_FAILED = re.compile(r"^step .+ failed:", re.MULTILINE)
TIMING = re.compile(r"^timing: (.+?) ([0-9.]+) s$")


def measured(command: list[str], env: dict, cwd: Path | None = None) -> tuple[float, int, str]:
    """Wall seconds, peak resident MB and stderr of one process (GNU ``time``)."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as report:
        completed = subprocess.run(
            ["/usr/bin/time", "-o", report.name, "-f", "%e %M", *command],
            capture_output=True,
            text=True,
            env=env,
            cwd=cwd,
        )
        # Exit 1 with "release gates failed" is a night that ran to its end and failed a gate;
        # any other failure (a step that failed, a run cut short) is not a measurement: a night
        # that stops after two steps looks fast and small.
        gate_only = (
            completed.returncode == 1
            and "release gates failed" in completed.stderr
            and not STEP_FAILED.search(completed.stderr)
        )
        if completed.returncode and not gate_only:
            sys.exit(f"{' '.join(command)} failed:\n{completed.stderr[-3000:]}")
        seconds, kilobytes = report.read().split()[-2:]
    return float(seconds), int(kilobytes) // 1024, completed.stderr


def library(work: Path, documents: int, seed: int, env: dict) -> Path:
    """The generated library of ``documents`` documents (generated the first time)."""
    folder = work / f"library-{documents}-{seed}"
    if not (folder / "suite.yaml").exists() or not (folder / "golden.jsonl").exists():
        started = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                str(ROOT / "bench" / "generate_library.py"),
                "--documents",
                str(documents),
                "--seed",
                str(seed),
                "--out",
                str(folder),
                "--overwrite",
            ],
            check=True,
            env=env,
            capture_output=True,
        )
        print(f"generated {documents:,} documents in {time.perf_counter() - started:.0f} s")
    return folder


def steps(stderr: str) -> tuple[dict[str, float], dict[str, float]]:
    found, timings = {}, {}
    for line in stderr.splitlines():
        if match := STEP.match(line):
            # A step that failed (a release gate, which does not stop the bench) has no time.
            found[match[1]] = float(match[2]) if match[2] else None
        elif match := TIMING.match(line):
            timings[match[1]] = float(match[2])
    return found, timings


def failed_gates(stderr: str) -> list[str]:
    """The lines ``rag-eval nightly`` prints under "release gates failed in <job>", one per
    failed gate, so that a step shown as "failed" is explained."""
    found, under = [], False
    for line in stderr.splitlines():
        if line.startswith("release gates failed in "):
            under = True
        elif under and line.startswith("  "):
            found.append(line.strip())
        else:
            under = False
    return found


def _timed(value) -> bool:
    """A step time, rather than ``None`` (the step failed) or ``"-"`` (it did not run)."""
    return isinstance(value, float)


def night(folder: Path, size: int, scratch: Path, partition: str, env: dict):
    registry = scratch / "suites"
    registry.mkdir(exist_ok=True)
    (registry / f"gen{size}.yaml").write_text((folder / "suite.yaml").read_text())
    home = scratch / "dagster_home"
    home.mkdir(exist_ok=True)
    (home / "dagster.yaml").write_text((ROOT / "dagster.yaml").read_text())
    environment = {
        **env,
        "RAG_EVAL_SUITES": str(registry),
        "RAG_EVAL_WAREHOUSE": str(scratch / "warehouse" / "rag_eval.duckdb"),
        "DAGSTER_HOME": str(home),
    }
    command = [
        str(BIN / "rag-eval"),
        "nightly",
        "--suite",
        f"gen{size}",
        "--partition",
        partition,
        "--timings",
        "--no-summary",
        "--no-guard",
    ]
    seconds, peak, stderr = measured(command, environment)
    found, timings = steps(stderr)
    for line in failed_gates(stderr):
        print(f"  {size:,} documents, {partition}: {line}")
    return seconds, peak, found, timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="2000,20000,100000")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--work", type=Path, default=Path("/tmp/rag_eval_bench_scale"))
    add_bytecode_option(parser)
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    args.work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    if not args.no_bytecode_cache:
        keep_compiled_modules(env, args.work)
    import_seconds, _, _ = measured([sys.executable, "-c", "import dagster"], env)
    print(f"reference: python -c 'import dagster' {import_seconds:.2f} s")

    results = {}
    for size in sizes:
        folder = library(args.work, size, args.seed, env)
        snapshot = folder / "corpus_snapshots" / "2026-10-01"
        started = time.perf_counter()
        subprocess.run(
            ["bash", "-c", "find documents -type f | sort | xargs cat | sha256sum"],
            cwd=snapshot,
            check=True,
            capture_output=True,
        )
        hashing = time.perf_counter() - started
        with tempfile.TemporaryDirectory(dir=args.work) as scratch:
            first = night(folder, size, Path(scratch), "2026-10-15", env)
            second = night(folder, size, Path(scratch), "2026-10-16", env)
        results[size] = (first, second, hashing)
        print(
            f"{size:>7,} documents: first night {first[0]:6.1f} s {first[1]:5d} MB, "
            f"second night {second[0]:6.1f} s {second[1]:5d} MB "
            f"(cat | sha256sum of the library {hashing:.2f} s)"
        )

    for label, index in (("first night (nothing staged)", 0), ("second night (staged)", 1)):
        print()
        print(f"{label}: seconds per step, and growth against the previous size")
        names = list(dict.fromkeys(n for s in sizes for n in results[s][index][2]))
        header = f"{'step':<44}" + "".join(f"{size:>10,}" for size in sizes)
        print(
            header
            + "".join(f"{'x' + format(b // a, ','):>10}" for a, b in itertools.pairwise(sizes))
        )
        rows = [(name, [results[s][index][2].get(name, "-") for s in sizes]) for name in names]
        rows.append(
            (
                "imports and defs",
                [results[s][index][3].get("imports and definitions", 0.0) for s in sizes],
            )
        )
        rows.append(("wall", [results[s][index][0] for s in sizes]))
        rows.append(("peak MB", [float(results[s][index][1]) for s in sizes]))
        for name, values in rows:
            growth = [
                f"{b / a:9.1f}x" if _timed(a) and _timed(b) and a > 0.05 else f"{'-':>10}"
                for a, b in itertools.pairwise(values)
            ]
            shown = [f"{v:10.2f}" if _timed(v) else f"{v or 'failed':>10}" for v in values]
            print(f"{name:<44}" + "".join(shown) + "".join(growth))

    print()
    for size, (seconds_goal, memory_goal) in GOALS.items():
        if size in results:
            first, second, _ = results[size]
            print(
                f"goal at {size:,} documents: under {seconds_goal:.0f} s and {memory_goal} MB; "
                f"first night {first[0]:.1f} s / {first[1]} MB "
                f"({first[0] / seconds_goal:.2f}x, {first[1] / memory_goal:.2f}x of the goal), "
                f"second night {second[0]:.1f} s / {second[1]} MB"
            )


if __name__ == "__main__":
    main()
