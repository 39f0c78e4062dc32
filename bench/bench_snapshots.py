"""Freezing and loading a large library against hashing its bytes with ``cat | sha256sum``.

Run: ``.venv/bin/python bench/bench_snapshots.py [--documents 20000] [--repeat 2]
[--work /tmp/rag_eval_bench_snapshots]``

The library is the seeded one of ``bench/generate_library.py`` (``--changed-fraction 0.01``:
a second snapshot with 1% of the documents changed, half revised to a new version, half edited
in place, every other file a byte-for-byte copy). Each measurement starts from fresh copies of
its files, in a corpus root of its own, so nothing is cached that a team would not have:

- reference: ``find documents -type f | sort | xargs cat | sha256sum`` over the first
  snapshot's files, the floor for anything that reads every byte;
- full freeze: ``rag-eval freeze`` of the first snapshot into an empty store (every document
  parsed, every file stored);
- re-freeze after a 1% change: ``rag-eval freeze`` of the second snapshot (a full copy of the
  files with 1% changed, as a team starting the next snapshot from a copy would have) into the
  store holding the first: only the changed documents are parsed, and the bytes it adds to the
  disk (allocated blocks, each inode once, as ``du`` counts them) are compared with the library's;
- load, first night: ``corpus_snapshot``'s work on a frozen snapshot with an empty run store
  (read and hash every file, the documents from the parse cache, the digest checked in full,
  the tables staged);
- load, later nights: the same once the snapshot is staged (files hashed and compared with the
  staged ones, nothing parsed).

``rag-eval`` start-up (``rag-eval --help``) is shown apart, and the freeze ratios are given with
and without it. Wall times are the best of ``--repeat`` runs (the machine is shared). Every
process keeps its compiled modules under ``<work>/pycache`` (``PYTHONPYCACHEPREFIX``, the
project's compiled once before the runs), as an installed environment does;
``--no-bytecode-cache`` keeps the environment as it is.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from compiled_modules import add_bytecode_option, keep_compiled_modules

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
FIRST, SECOND = "2026-10-01", "2026-11-01"

LOAD_SCRIPT = """
import datetime as dt, sys, time
from pathlib import Path
from rag_eval_pipeline.lib.store.run_store import RunStore
from rag_eval_pipeline.lib.store.staging import stage_snapshot
store = RunStore(sys.argv[2])
for night in ("first", "later"):
    started = time.perf_counter()
    staged = stage_snapshot(store, Path(sys.argv[1]), dt.datetime(2026, 10, 15))
    print(night, time.perf_counter() - started, staged.parsed, staged.cached, staged.corpus_digest)
"""


def disk_bytes(root: Path) -> int:
    """Bytes allocated under ``root``, each inode counted once (what ``du`` reports)."""
    seen, total = set(), 0
    for folder, _, names in os.walk(root):
        for name in names:
            status = os.lstat(os.path.join(folder, name))
            if (status.st_dev, status.st_ino) not in seen:
                seen.add((status.st_dev, status.st_ino))
                total += status.st_blocks * 512
    return total


def copy_documents(source: Path, target: Path) -> None:
    """Fresh, writable byte-for-byte copies of a snapshot's documents."""
    (target / "documents").mkdir(parents=True)
    for path in (source / "documents").iterdir():
        shutil.copyfile(path, target / "documents" / path.name)


def timed(command: list[str], **kwargs) -> tuple[float, str]:
    started = time.perf_counter()
    completed = subprocess.run(command, capture_output=True, text=True, **kwargs)
    elapsed = time.perf_counter() - started
    if completed.returncode:
        sys.exit(f"{' '.join(map(str, command))} failed:\n{completed.stderr[-2000:]}")
    return elapsed, completed.stdout


def generated(work: Path, documents: int, seed: int) -> Path:
    library = work / f"library-{documents}-{seed}"
    if not (library / "corpus_snapshots" / SECOND / "manifest.json").exists():
        timed(
            [
                sys.executable,
                str(ROOT / "bench" / "generate_library.py"),
                "--documents",
                str(documents),
                "--seed",
                str(seed),
                "--changed-fraction",
                "0.01",
                "--out",
                str(library),
                "--overwrite",
            ]
        )
    return library / "corpus_snapshots"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--documents", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--work", type=Path, default=Path("/tmp/rag_eval_bench_snapshots"))
    add_bytecode_option(parser)
    args = parser.parse_args()
    if not args.no_bytecode_cache:
        keep_compiled_modules(os.environ, args.work)
    args.work.mkdir(parents=True, exist_ok=True)
    source = generated(args.work, args.documents, args.seed)
    files = list((source / FIRST / "documents").iterdir())
    library_bytes = sum(path.stat().st_size for path in files)
    print(
        f"library: {len(files):,} document files, {library_bytes / 1e6:.1f} MB "
        f"({args.documents:,} documents, seed {args.seed}); snapshot {SECOND}: 1% changed"
    )

    reference = min(
        timed(
            ["bash", "-c", "find documents -type f | sort | xargs cat | sha256sum"],
            cwd=source / FIRST,
        )[0]
        for _ in range(args.repeat)
    )
    startup = min(timed([str(BIN / "rag-eval"), "--help"])[0] for _ in range(args.repeat))

    full, refreeze, added, library_disk, digests, loads = [], [], [], [], set(), []
    for attempt in range(args.repeat):
        with tempfile.TemporaryDirectory(dir=args.work) as scratch:
            corpus_root = Path(scratch) / "corpus_snapshots"
            copy_documents(source / FIRST, corpus_root / FIRST)
            seconds, out_first = timed([str(BIN / "rag-eval"), "freeze", str(corpus_root / FIRST)])
            full.append(seconds)
            library_disk.append(disk_bytes(corpus_root))
            copy_documents(source / SECOND, corpus_root / SECOND)
            seconds, out_second = timed(
                [str(BIN / "rag-eval"), "freeze", str(corpus_root / SECOND)]
            )
            refreeze.append(seconds)
            # After the freeze the copied files are links to the stored bytes: what is left is
            # what the new snapshot added.
            added.append(disk_bytes(corpus_root) - library_disk[-1])
            digests.add(out_first.split("digest ")[1].split()[0])
            run = subprocess.run(
                [sys.executable, "-c", LOAD_SCRIPT, str(corpus_root / SECOND), scratch + "/store"],
                capture_output=True,
                text=True,
                check=True,
            )
            loads.append(run.stdout.split("\n"))
            if attempt == 0:
                print(f"  freeze {FIRST}: {out_first.strip().splitlines()[-1].strip()}")
                print(f"  freeze {SECOND}: {out_second.strip().splitlines()[-1].strip()}")
    first_night = min(float(run[0].split()[1]) for run in loads)
    later_night = min(float(run[1].split()[1]) for run in loads)
    parsed_first = loads[0][0].split()[2:4]

    full_seconds, refreeze_seconds = min(full), min(refreeze)
    print()
    print(f"reference, find | sort | xargs cat | sha256sum: {reference:6.2f} s")
    print(f"rag-eval start-up (rag-eval --help):          {startup:6.2f} s")
    print(f"full freeze (rag-eval freeze):                {full_seconds:6.2f} s")
    print(f"re-freeze after 1% changed:                   {refreeze_seconds:6.2f} s")
    print(
        f"load, first night (nothing staged):           {first_night:6.2f} s "
        f"(documents parsed {parsed_first[0]}, from the parse cache {parsed_first[1]})"
    )
    print(f"load, later nights (snapshot staged):         {later_night:6.2f} s (nothing parsed)")
    print()
    print("ratios (goal: freeze and load within 3x of cat | sha256sum; re-freeze within 15% of a")
    print("full freeze; the new snapshot adds under 3% of the library's bytes)")
    print(f"  full freeze / reference              {full_seconds / reference:6.2f}x")
    print(f"  full freeze without start-up / ref.  {(full_seconds - startup) / reference:6.2f}x")
    print(f"  load first night / reference         {first_night / reference:6.2f}x")
    print(f"  load later nights / reference        {later_night / reference:6.2f}x")
    print(f"  re-freeze / full freeze              {refreeze_seconds / full_seconds:6.2%}")
    print(
        f"  re-freeze / full freeze, start-up excluded "
        f"{(refreeze_seconds - startup) / (full_seconds - startup):6.2%}"
    )
    print(
        f"  disk added by the new snapshot       {min(added) / 1e6:6.2f} MB = "
        f"{min(added) / min(library_disk):6.2%} of the library's {min(library_disk) / 1e6:.1f} MB "
        f"on disk ({min(added) / library_bytes:.2%} of its {library_bytes / 1e6:.1f} MB of files)"
    )
    if len(digests) != 1:
        raise SystemExit(f"the full freezes disagree on the digest: {sorted(digests)}")


if __name__ == "__main__":
    main()
