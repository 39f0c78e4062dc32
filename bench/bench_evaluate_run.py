"""``rag-eval evaluate-run`` on a 1,000,000-line TREC run against a plain pytrec_eval script and
the ir_measures command line: wall time and peak memory of each, values checked equal.

Run: ``.venv/bin/python bench/bench_evaluate_run.py [--queries 10000] [--depth 100]
[--repeat 3] [--work /tmp/rag_eval_bench_evaluate_run]``

The inputs are seeded and written once as TREC files (``qid Q0 docno rank score tag`` and
``qid 0 docno rel``): every query retrieves ``depth`` documents with scores rounded to 4
decimals (so some ties), about 5 documents a query are judged relevant (grades 1-3, one of
them not retrieved) and a few judged 0. The three contenders, each a fresh process reading both
files and printing the means of nDCG@5, nDCG@10, P@5, R@5, RR and AP at relevance level 1:

- ours: ``rag-eval evaluate-run qrels run -m ... --rel-level 1``;
- pytrec_eval: a plain script (read both files line by line into dicts, one
  ``RelevanceEvaluator.evaluate``, average);
- ir_measures: ``ir_measures qrels run "nDCG@5 nDCG@10 P@5 R@5 RR AP"``.

Each is run ``--repeat`` times and the best wall time is kept (the machine is shared), with the
peak resident memory of that process (``wait4``). Every process keeps its compiled modules under
``<work>/pycache`` (``PYTHONPYCACHEPREFIX``, the project's compiled once before the runs), as an
installed environment does; ``--no-bytecode-cache`` keeps the environment as it is (with
``PYTHONDONTWRITEBYTECODE`` set, ``rag-eval`` would compile its changed modules in every run). Ratios are against pytrec_eval and ir_measures
measured in the same run; the start-up of a bare ``rag-eval --help`` is shown as a reference.
"""

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from compiled_modules import add_bytecode_option, keep_compiled_modules

BIN = Path(sys.executable).parent
MEASURES = ("nDCG@5", "nDCG@10", "P@5", "R@5", "RR", "AP")
TOLERANCE = 1e-4

PYTREC_SCRIPT = """
import sys
from collections import defaultdict
import pytrec_eval

qrels = defaultdict(dict)
with open(sys.argv[1]) as handle:
    for line in handle:
        query, _, doc, grade = line.split()
        qrels[query][doc] = int(grade)
run = defaultdict(dict)
with open(sys.argv[2]) as handle:
    for line in handle:
        query, _, doc, _, score, _ = line.split()
        run[query][doc] = float(score)
names = {"ndcg_cut_5": "nDCG@5", "ndcg_cut_10": "nDCG@10", "P_5": "P@5", "recall_5": "R@5",
         "recip_rank": "RR", "map": "AP"}
evaluator = pytrec_eval.RelevanceEvaluator(
    qrels, {"ndcg_cut.5,10", "P.5", "recall.5", "recip_rank", "map"}, relevance_level=1
)
values = evaluator.evaluate(run)
for measure, label in names.items():
    scores = [per_query[measure] for per_query in values.values()]
    print(f"{label}\\t{sum(scores) / len(scores):.6f}")
"""


def write_inputs(folder: Path, queries: int, depth: int, seed: int) -> tuple[Path, Path]:
    """A seeded TREC run of ``queries`` x ``depth`` lines and its qrels."""
    folder.mkdir(parents=True, exist_ok=True)
    run_path, qrels_path = folder / "run.trec", folder / "qrels.trec"
    marker = folder / f"inputs-{queries}-{depth}-{seed}"
    if marker.exists():
        return qrels_path, run_path
    rng = np.random.default_rng(seed)
    query = np.repeat(np.arange(queries), depth)
    rank = np.tile(np.arange(1, depth + 1), queries)
    document = (rng.integers(0, 1_000_000, queries)[query] + rank * 7919) % 1_000_000
    score = np.round(np.sort(rng.random((queries, depth)) * 30, axis=1)[:, ::-1].ravel(), 4)
    query_ids = np.char.add("q", np.char.zfill(query.astype(str), 6))
    doc_ids = np.char.add("d", np.char.zfill(document.astype(str), 7))
    with open(run_path, "w") as handle:
        for q, d, r, s in zip(query_ids, doc_ids, rank, score, strict=True):
            handle.write(f"{q} Q0 {d} {r} {s:.4f} bench\n")
    draw = rng.random(queries * depth)
    relevant = draw < 0.1 * (score / 30) ** 2
    irrelevant = (draw > 0.97) & ~relevant
    grades = np.where(relevant, rng.integers(1, 4, queries * depth), 0)
    with open(qrels_path, "w") as handle:
        for q, d, g, keep in zip(query_ids, doc_ids, grades, relevant | irrelevant, strict=True):
            if keep:
                handle.write(f"{q} 0 {d} {g}\n")
        for number in range(queries):
            handle.write(f"q{number:06d} 0 u{number:07d} {rng.integers(1, 4)}\n")
    marker.touch()
    return qrels_path, run_path


def measured(command: list[str]) -> tuple[float, int, str]:
    """Wall seconds, peak resident MB and stdout of one process, as GNU ``time`` reports them
    (the memory a forked child counts before it runs its program would otherwise be this
    script's)."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as report:
        timed = ["/usr/bin/time", "-o", report.name, "-f", "%e %M", *command]
        completed = subprocess.run(timed, capture_output=True, text=True)
        if completed.returncode:
            sys.exit(f"{' '.join(command)} failed:\n{completed.stderr[-2000:]}")
        seconds, kilobytes = report.read().split()[-2:]
    return float(seconds), int(kilobytes) // 1024, completed.stdout


def best(command: list[str], repeat: int) -> tuple[float, int, str]:
    """The fastest of ``repeat`` runs."""
    return min((measured(command) for _ in range(repeat)), key=lambda run: run[0])


def means(text: str, label_field: int, value_field: int) -> dict[str, float]:
    values = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) > max(label_field, value_field) and fields[0] != "num_q":
            try:
                values[fields[label_field]] = float(fields[value_field])
            except ValueError:
                continue
    return values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=10_000)
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--seed", type=int, default=20261001)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--work", type=Path, default=Path("/tmp/rag_eval_bench_evaluate_run"))
    add_bytecode_option(parser)
    args = parser.parse_args()
    if not args.no_bytecode_cache:
        keep_compiled_modules(os.environ, args.work)

    qrels, run = write_inputs(args.work, args.queries, args.depth, args.seed)
    script = args.work / "plain_pytrec_eval.py"
    script.write_text(PYTREC_SCRIPT)
    lines = run.read_bytes().count(b"\n")
    print(f"run: {lines:,} lines over {args.queries:,} queries ({run.stat().st_size / 1e6:.0f} MB)")
    judgements = qrels.read_bytes().count(b"\n")
    print(f"qrels: {judgements:,} judgements")

    ours_command = [str(BIN / "rag-eval"), "evaluate-run", str(qrels), str(run), "--rel-level", "1"]
    for measure in MEASURES:
        ours_command += ["-m", measure]
    contenders = {
        "rag-eval evaluate-run": ours_command,
        "plain pytrec_eval script": [sys.executable, str(script), str(qrels), str(run)],
        "ir_measures CLI": [str(BIN / "ir_measures"), str(qrels), str(run), " ".join(MEASURES)],
    }
    results = {name: best(command, args.repeat) for name, command in contenders.items()}
    startup = best([str(BIN / "rag-eval"), "--help"], args.repeat)

    values = {
        "rag-eval evaluate-run": means(results["rag-eval evaluate-run"][2], 0, 2),
        "plain pytrec_eval script": means(results["plain pytrec_eval script"][2], 0, 1),
        "ir_measures CLI": means(results["ir_measures CLI"][2], 0, 1),
    }
    print()
    print(f"{'measure':<9}" + "".join(f"{name:>26}" for name in values))
    failures = []
    for measure in MEASURES:
        row = [values[name].get(measure) for name in values]
        print(
            f"{measure:<9}" + "".join(f"{v:>26.4f}" if v is not None else f"{'-':>26}" for v in row)
        )
        reference = values["plain pytrec_eval script"].get(measure)
        for name, value in zip(values, row, strict=True):
            if value is None or reference is None or abs(value - reference) > TOLERANCE:
                failures.append(f"{measure}: {name} {value} vs pytrec_eval {reference}")
    print()
    print(f"best of {args.repeat} runs each (wall seconds, peak resident memory of the process)")
    for name, (seconds, peak, _) in results.items():
        print(f"  {name:<26} {seconds:6.2f} s  {peak:6d} MB")
    print(f"  {'rag-eval --help (start-up)':<26} {startup[0]:6.2f} s  {startup[1]:6d} MB")
    ours_seconds, ours_peak, _ = results["rag-eval evaluate-run"]
    for name in ("plain pytrec_eval script", "ir_measures CLI"):
        seconds, peak, _ = results[name]
        print(
            f"  {name} / ours: time {seconds / ours_seconds:.2f}x, memory {peak / ours_peak:.2f}x"
        )
    if failures:
        raise SystemExit("values disagree:\n" + "\n".join(failures))
    print("means agree to 1e-4 (4 decimals, as printed)")


if __name__ == "__main__":
    main()
