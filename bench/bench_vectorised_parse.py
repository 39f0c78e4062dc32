"""Would parsing in Polars make ``rag-eval freeze`` cheaper? The project's parser against canonical
lines built with Polars expressions, on the seeded library of ``bench/bench_snapshots.py``.

Run: ``.venv/bin/python bench/bench_vectorised_parse.py [--documents 20000] [--repeat 3]
[--work /tmp/rag_eval_bench_snapshots]``

The freeze's largest cost is parsing: every document's front matter, sections and canonical JSON
lines built in Python (``corpus._parsed_chunk``), on both cores (``corpus.parse_rows``). The
obvious way to cut it is to build every line at once with Polars' string expressions, which run
in Rust on every core. This bench measures that route before anyone builds it: ``polars_lines``
below builds the canonical blocks of this library with Polars (front matter cut by regular
expressions, sections split at ``## `` headings, each text normalised and JSON-escaped, the lines
put together and joined per document), and its blocks are checked byte for byte against the
project's. It is a measurement, not a parser: it handles only what this generated library holds
(plain ``key: value`` front matter, ``\\n`` line ends, at most nine sections, no control
characters besides newlines and tabs) and has none of the parser's checks or error messages; the
full rules (YAML scalars, every character JSON escapes, Python's white space) could only add to
its cost.

Printed: wall time and CPU time (this process and its workers, all cores) of the project's
parser in one process, of ``parse_rows`` on both cores, and of the Polars route (with the SHA-256
of every line and block, which Polars has no function for, taken in Python as the parser does);
the best of ``--repeat`` runs each, and the ratios.
"""

import argparse
import hashlib
import os
import resource
import time
from pathlib import Path

import polars as pl
from bench_snapshots import FIRST, generated

from rag_eval_pipeline.lib.inputs import corpus

_FRONT_KEYS = (
    "doc_id",
    "title",
    "version",
    "effective_date",
    "status",
    "language",
    "superseded_by",
)


def _escaped(column: pl.Expr) -> pl.Expr:
    """JSON string escaping of a text with no control characters but newlines and tabs."""
    return (
        column.str.replace_all("\\", "\\\\", literal=True)
        .str.replace_all('"', '\\"', literal=True)
        .str.replace_all("\n", "\\n", literal=True)
        .str.replace_all("\t", "\\t", literal=True)
    )


def _quoted(column: pl.Expr) -> pl.Expr:
    return pl.lit('"') + _escaped(column) + pl.lit('"')


def polars_lines(contents: list[bytes]) -> tuple[list[str], list[str], list[str]]:
    """Every document's block (its canonical lines joined by newlines), the blocks' SHA-256 and
    every line's, for documents of this library's shape (module docstring)."""
    files = pl.DataFrame({"raw": pl.Series(contents, dtype=pl.Binary)}).with_row_index("doc")
    parts = (
        files.lazy()
        .select(
            "doc",
            pl.col("raw")
            .cast(pl.String)
            .str.extract_groups(r"(?s)\A---\n(.*?)\n---\n(.*)\z")
            .alias("parts"),
        )
        .unnest("parts")
        .rename({"1": "front", "2": "body"})
    )
    meta = parts.select(
        "doc",
        *[pl.col("front").str.extract(rf"(?m)^{key}: *(.*?) *$").alias(key) for key in _FRONT_KEYS],
    )
    sections = (
        parts.select(
            "doc",
            pl.col("body").str.replace_all(r"(?m)^## ", "\x00").str.split("\x00").alias("section"),
        )
        .explode("section")
        .filter(pl.col("section") != "")
        .with_columns(pl.int_range(1, pl.len() + 1).over("doc").alias("number"))
        .with_columns(pl.col("section").str.splitn("\n", 2).alias("split"))
        .unnest("split")
        .select(
            "doc",
            "number",
            pl.col("field_0").str.strip_chars().alias("section_title"),
            pl.col("field_1")
            .str.replace_all(r"[ \t]+\n", "\n")
            .str.strip_chars(" \t\n")
            .alias("text"),
        )
    )
    superseded_by = (
        pl.when(pl.col("superseded_by").is_null())
        .then(pl.lit("null"))
        .otherwise(_quoted(pl.col("superseded_by")))
    )
    passage_id = pl.concat_str(
        [
            pl.lit('"'),
            _escaped(pl.col("doc_id")),
            pl.lit("@v"),
            pl.col("version"),
            pl.lit("#s"),
            pl.col("number").cast(pl.String),
            pl.lit('"'),
        ]
    )
    # The fields in the canonical line's order (its keys sorted).
    fields = {
        "doc_id": _quoted(pl.col("doc_id")),
        "effective_date": _quoted(pl.col("effective_date")),
        "language": _quoted(pl.col("language")),
        "passage_id": passage_id,
        "section_title": _quoted(pl.col("section_title")),
        "status": _quoted(pl.col("status")),
        "superseded_by": superseded_by,
        "text": _quoted(pl.col("text")),
        "title": _quoted(pl.col("title")),
        "version": pl.col("version"),
    }
    pieces = []
    for position, (key, value) in enumerate(fields.items()):
        pieces += [pl.lit(("{" if position == 0 else ",") + f'"{key}":'), value]
    line = pl.concat_str([*pieces, pl.lit("}")]).alias("line")
    lines = sections.join(meta, on="doc").select("doc", "number", line).sort("doc", "number")
    blocks = lines.group_by("doc", maintain_order=True).agg(pl.col("line").str.join("\n"))
    lines, blocks = pl.collect_all([lines, blocks])
    line_digests = [hashlib.sha256(v).hexdigest() for v in lines["line"].cast(pl.Binary)]
    block_digests = [hashlib.sha256(v).hexdigest() for v in blocks["line"].cast(pl.Binary)]
    return blocks["line"].to_list(), block_digests, line_digests


def cpu_seconds() -> float:
    """CPU time of this process and of its finished workers, user and system, all threads."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    workers = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + workers.ru_utime + workers.ru_stime


def best(function, repeat: int) -> tuple[float, float, object]:
    """Best wall time and best CPU time of ``repeat`` calls, and the last result."""
    walls, cpus = [], []
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), cpu_seconds()
        result = function()
        walls.append(time.perf_counter() - wall)
        cpus.append(cpu_seconds() - cpu)
    return min(walls), min(cpus), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--documents", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--work", type=Path, default=Path("/tmp/rag_eval_bench_snapshots"))
    options = parser.parse_args()
    snapshot = generated(options.work, options.documents, options.seed) / FIRST
    folder = snapshot / "documents"
    files = [
        corpus.read_document_file(os.path.join(folder, name), snapshot, link)
        for name, link in corpus._document_names(snapshot)
    ]
    contents = [document_file.content() for document_file in files]
    size = sum(map(len, contents))
    print(f"{len(files):,} files, {size / 1e6:.0f} MB, {os.cpu_count()} cores")

    serial_wall, serial_cpu, (rows, _) = best(lambda: corpus._parsed_chunk(files), options.repeat)
    both_wall, both_cpu, _ = best(lambda: corpus.parse_rows(files), options.repeat)
    polars_wall, polars_cpu, (blocks, block_digests, line_digests) = best(
        lambda: polars_lines(contents), options.repeat
    )
    same_blocks = sum(a == b for a, b in zip(rows["block"].to_list(), blocks, strict=True))
    same_digests = rows["document_digest"].to_list() == block_digests
    passage_digests = [d for joined in rows["passage_digests"].to_list() for d in joined.split()]
    print(
        f"blocks identical to the parser's: {same_blocks:,} of {rows.height:,}; document digests "
        f"{'identical' if same_digests else 'DIFFERENT'}; passage digests "
        f"{'identical' if passage_digests == line_digests else 'DIFFERENT'}"
    )
    print(f"best of {options.repeat}                      wall      CPU")
    print(f"parser, one process            {serial_wall:6.2f} s {serial_cpu:6.2f} s")
    print(f"parser, both cores (parse_rows){both_wall:6.2f} s {both_cpu:6.2f} s")
    print(f"Polars expressions, all cores  {polars_wall:6.2f} s {polars_cpu:6.2f} s")
    print(f"Polars / parser on both cores: wall {polars_wall / both_wall:.2f}x")
    print(f"Polars / parser in one process: CPU {polars_cpu / serial_cpu:.2f}x")


if __name__ == "__main__":
    main()
