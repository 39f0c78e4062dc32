"""Reading and writing the formats the field already uses, and importing public collections.

Readers (each error is a ``FormatError`` naming the file, the line and the problem):

- TREC run files, ``qid Q0 docno rank score tag``, whitespace separated (``read_trec_run``). The
  rank column is read but not used: like trec_eval, ranks come from the score (descending, ties
  by doc id descending), so a file's own ranks never change a metric.
- TREC qrels, ``qid iter docno rel`` (``read_trec_qrels``); negative grades are kept as read
  (trec_eval treats them as judged-but-unassessed: no gain, never relevant).
- Qrels tables with a header line, ``qid docid grade`` or BEIR's ``query-id corpus-id score``
  (``read_qrels_table``).
- BEIR folders: ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/test.tsv`` (``read_beir``).

``write_trec_run`` exports a run with trec_eval's ranks.

Importers (``import_beir``, ``import_trec``, ``import_squad``) turn a collection into the
project's inputs: a frozen corpus snapshot folder and a golden-set JSONL file. The mapping:

- every source document becomes ``documents/<doc_id>@v1.md`` with version 1, status ``current``,
  language ``en``, the given effective date, and ONE section headed ``Text`` whose body is the
  document text, so its only passage is ``<doc_id>@v1#s1``. A document without a title takes its
  source id as title; a document without text takes its title as text; a document with neither
  gets the text ``[empty in the source collection]`` (Cranfield 471 and 995), because a snapshot
  section may not be empty. A body line starting ``## `` is indented by one space so it cannot
  open a second section. The source id is kept in the front matter as ``source_id``.
- doc ids matching ``^[A-Za-z0-9][A-Za-z0-9_.:-]*$`` are kept as they are. Any other id is made
  safe deterministically: each run of other characters becomes ``_``, a leading non-alphanumeric
  character gets an ``x`` prefix, and ``-`` plus the first 8 hex digits of the SHA-256 of the
  source id is appended, e.g. ``Sky_(United_Kingdom)_0`` -> ``Sky__United_Kingdom__0-491a6f2e``.
  The returned ``ImportReport.doc_ids`` and each document's ``source_id`` keep the mapping.
- grades (TREC/BEIR qrels) map to the project's 0-3 scale by one explicit rule, chosen so that
  ``rel_level=2`` on the golden set means exactly "judged relevant (grade > 0) in the source":
  the collection's top grade -> 3 (the answering passage), any other positive grade -> 2
  (supporting), 0 -> 0 (judged irrelevant), negative -> dropped (trec_eval: unjudged). Grade 1
  stays reserved for superseded versions, which imported collections do not have. Binary qrels
  thus become 1 -> 3; Cranfield (1-4, 4 best) becomes 4 -> 3 and 1, 2, 3 -> 2. The top grade is
  the collection's maximum, not each query's. Pass ``grade_map`` to choose another mapping (for
  instance ``{0: 0, 1: 0, 2: 2, 3: 3}`` to keep TREC DL's "grade 1 is not relevant").
- a query with at least one positive judgement becomes an ``answerable`` item whose gold lists
  every judged document with its mapped grade; a query judged only non-relevant becomes an
  ``out_of_scope`` item (the corpus holds no answer); queries absent from the qrels are skipped.
- SQuAD 2.0: each paragraph is a document ``<article title>_<n>`` (n counts paragraphs from 0);
  an answerable question -> stratum ``answerable``, gold = its paragraph at grade 3,
  ``reference_answers`` = its answer texts (exact duplicates removed, order kept); an
  ``is_impossible`` question -> stratum ``near_miss``, gold = its paragraph at grade 0, no
  reference answers. ``must_mention`` is empty for every imported item.

Everything is written into a temporary folder beside the target, frozen with
``freeze_snapshot`` and checked there, then renamed into place: a failed import leaves nothing
behind and never overwrites an existing snapshot or golden set.
"""

import datetime as dt
import hashlib
import io
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import yaml

from rag_eval_pipeline.lib.errors import InputError
from rag_eval_pipeline.lib.files import replaced_atomically
from rag_eval_pipeline.lib.inputs.corpus import (
    DOC_ID_PATTERN,
    freeze_snapshot,
    normalise_text,
    passage_id,
)
from rag_eval_pipeline.lib.inputs.golden import (
    ANSWERABLE,
    json_line_problem,
    json_problem,
    jsonl_lines,
    load_golden_set,
)
from rag_eval_pipeline.lib.metrics.retrieval import QRELS_SCHEMA, RUN_SCHEMA

DEFAULT_EFFECTIVE_DATE = dt.date(2026, 1, 1)
SECTION_HEADING = "Text"
EMPTY_DOCUMENT_TEXT = "[empty in the source collection]"
TOP_GRADE = 3
SUPPORTING_GRADE = 2

CORPUS_SCHEMA = {"doc_id": pl.String, "title": pl.String, "text": pl.String}
QUERY_SCHEMA = {"query_id": pl.String, "text": pl.String}
QRELS_LINES_SCHEMA = {**QRELS_SCHEMA, "line": pl.Int64}
RUN_COLUMNS = ("query_id", "iteration", "doc_id", "rank", "score", "tag")
UTF8_BOM = b"\xef\xbb\xbf"
# The fast readers parse a file in line-aligned pieces of about this many bytes: small pieces
# keep the parse's scratch memory small (4 MB pieces left about 25 MB more of it in the
# allocator's pools, 1 MB pieces cost no measurable time).
PIECE_BYTES = 1 << 20
_PAIR_HASH = pl.struct("query_id", "doc_id").hash()
# White space other than spaces, tabs and line ends (as UTF-8): a file with any is read line by
# line, where it separates fields as trec_eval's reader would.
_OTHER_WHITE_SPACE = tuple(
    character.encode("utf-8")
    for character in "\x0b\x0c\x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000"
    + "".join(chr(code) for code in range(0x2000, 0x200B))
)


class FormatError(InputError):
    """Input that cannot be read: the message names the file, the line and the problem."""


@dataclass(frozen=True)
class BeirCollection:
    """A BEIR-style collection: documents, queries and graded qrels, ids as strings."""

    corpus: pl.DataFrame
    queries: pl.DataFrame
    qrels: pl.DataFrame


@dataclass(frozen=True)
class ImportReport:
    """What an import wrote: where, the frozen digest, counts, and the source -> doc id map."""

    snapshot_dir: Path
    golden_path: Path
    corpus_digest: str
    documents: int
    items: int
    answerable: int
    no_answer: int
    skipped_queries: int
    doc_ids: dict[str, str]


def _fail(path: Path | str, message: str, line: int | None = None) -> FormatError:
    where = f"{path}:{line}" if line is not None else f"{path}"
    return FormatError(f"{where}: {message}")


def _read_bytes(path: Path) -> bytes:
    """The file's bytes without a UTF-8 byte order mark (which would otherwise glue itself to
    the first id of the file)."""
    if not path.is_file():
        raise _fail(path, "file does not exist")
    data = path.read_bytes()
    return data[len(UTF8_BOM) :] if data.startswith(UTF8_BOM) else data


def _read_text(path: Path) -> str:
    data = _read_bytes(path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        offset = exc.start + (len(UTF8_BOM) if path.read_bytes().startswith(UTF8_BOM) else 0)
        raise _fail(path, f"not UTF-8 text ({exc.reason} at byte {offset})") from None


def _line_pieces(path: Path, size: int) -> Iterator[bytes]:
    """The file's bytes without a UTF-8 byte order mark, as whole lines: pieces of about
    ``size`` bytes (longer when a line is), each ending just after a line end, except the last
    when the file does not end with one. Joined, the pieces are the file."""
    if not path.is_file():
        raise _fail(path, "file does not exist")
    with path.open("rb") as handle:
        rest = handle.read(len(UTF8_BOM))
        if rest == UTF8_BOM:
            rest = b""
        while block := handle.read(size):
            piece = rest + block
            end = piece.rfind(b"\n") + 1
            if end:
                yield piece[:end]
            rest = piece[end:]
        if rest:
            yield rest


def _whitespace_table(
    path: Path,
    columns: Sequence[str],
    keep: Sequence[str],
    numbers: Mapping[str, type[pl.DataType]],
    *,
    numbered: bool = False,
) -> pl.DataFrame | None:
    """The ``keep`` columns of the file, read by Polars' CSV reader, when every non-blank line
    has exactly ``len(columns)`` fields separated by spaces or tabs, the file is UTF-8, every
    value of a column in ``numbers`` casts to its numeric type (a float also finite) and no
    ``(query_id, doc_id)`` pair repeats; None otherwise (the caller then reads it line by line,
    which names the bad line). Columns not in ``numbers`` are strings. ``numbered``: the rows
    must be the file's lines one for one (no blank line), so a row's position is its line
    number.

    The file is read in line-aligned pieces of ``PIECE_BYTES`` (``_line_pieces``), each parsed,
    checked and hashed on its own, so the whole file's bytes are never held, and its parse is
    only ever one piece's. Fields are what ``_split_lines`` finds (runs of non-white-space), so
    both readers agree."""
    tables, hashes = [], []
    for piece in _line_pieces(path, PIECE_BYTES):
        table = _whitespace_piece(piece, columns, keep, numbers, numbered=numbered)
        if table is None:
            return None
        tables.append(table)
        hashes.append(table.select(_PAIR_HASH).to_series())
    if not tables:
        return None
    if not _distinct_pairs(tables, pl.concat(hashes, rechunk=True)):
        return None
    # The pieces stay chunks of one frame: joining them into one chunk a column would hold each
    # column twice for a moment, and the allocator would keep that memory afterwards.
    return pl.concat(tables, rechunk=False)


def _whitespace_piece(
    data: bytes,
    columns: Sequence[str],
    keep: Sequence[str],
    numbers: Mapping[str, type[pl.DataType]],
    *,
    numbered: bool,
) -> pl.DataFrame | None:
    """One piece of whole lines for ``_whitespace_table``: its table, or None."""
    if b"\x0b" in data or b"\x0c" in data:
        return None
    if not data.isascii():
        if any(space in data for space in _OTHER_WHITE_SPACE):
            return None
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return None
    if b"\t" in data or b"\r" in data:
        data = re.sub(rb"[ \t\r]+", b" ", data)
    # Single spaces between fields and none at line ends give every line exactly the fields it
    # should when the spaces add up: a line with a double, leading or trailing space has more
    # fields, which the reader refuses, and then some other line has fewer.
    if not _spaces_add_up(data, len(columns)):
        if numbered:
            return None
        data = re.sub(rb" *\n[ \n]*", b"\n", data).strip(b" \n")
        if not _spaces_add_up(data, len(columns)):
            return None
    try:
        table = (
            pl.scan_csv(
                io.BytesIO(data),
                separator=" ",
                has_header=False,
                schema={name: pl.String for name in columns},
                quote_char=None,
            )
            .select(list(keep))
            .with_columns(pl.col(name).cast(dtype, strict=False) for name, dtype in numbers.items())
            .collect()
        )
    except (pl.exceptions.PolarsError, ValueError):
        return None
    for name, dtype in numbers.items():
        values = table[name]
        if values.null_count() or (dtype.is_float() and not values.is_finite().all()):
            return None
    return table


def _spaces_add_up(data: bytes, fields: int) -> bool:
    lines = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
    return bool(data.strip()) and data.count(b" ") == (fields - 1) * lines


def _distinct_pairs(tables: list[pl.DataFrame], hashes: pl.Series) -> bool:
    """Whether no ``(query_id, doc_id)`` pair repeats across ``tables``, given the pairs' hashes
    (``_PAIR_HASH``, 8 bytes a row): distinct hashes prove it (sorted in place, then each
    compared with the next through two slices, so nothing else the size of the tables is made);
    only when hashes collide are the pairs themselves compared."""
    hashes.sort(in_place=True)
    if not (hashes.slice(1) == hashes.slice(0, hashes.len() - 1)).any():
        return True
    pairs = pl.concat(table.select("query_id", "doc_id") for table in tables)
    return pairs.select(pl.struct("query_id", "doc_id").n_unique()).item() == pairs.height


def _split_lines(path: Path, separator: str | None = None) -> pl.DataFrame:
    """Non-blank lines of a text file as ``line`` (1-based) and ``fields`` (a list of strings).

    ``separator=None`` splits on any run of whitespace (spaces or tabs), as trec_eval does.
    """
    lines = (
        pl.DataFrame({"text": _read_text(path).split("\n")}, schema={"text": pl.String})
        .with_row_index("line", offset=1)
        .with_columns(pl.col("line").cast(pl.Int64), pl.col("text").str.strip_chars())
        .filter(pl.col("text") != "")
    )
    if separator is None:
        fields = pl.col("text").str.extract_all(r"\S+")
    else:
        fields = pl.col("text").str.split(separator).list.eval(pl.element().str.strip_chars())
    return lines.select("line", fields.alias("fields"))


def _first_row(frame: pl.DataFrame, condition: pl.Expr) -> dict | None:
    offending = frame.filter(condition)
    return offending.row(0, named=True) if offending.height else None


def _check_field_count(lines: pl.DataFrame, expected: int, path: Path, layout: str) -> None:
    bad = _first_row(lines, pl.col("fields").list.len() != expected)
    if bad is not None:
        raise _fail(
            path,
            f"found {len(bad['fields'])} fields, expected {expected} ({layout})",
            bad["line"],
        )


def _check_unique_pairs(
    frame: pl.DataFrame, path: Path, first: str, second: str, what: str
) -> None:
    """Raise on the earliest line whose ``(first, second)`` pair appeared on an earlier line."""
    pair = pl.struct(first, second)
    repeated = _first_row(frame, ~pair.is_first_distinct())
    if repeated is None:
        return
    original = frame.filter(
        (pl.col(first) == repeated[first]) & (pl.col(second) == repeated[second])
    )["line"].min()
    raise _fail(
        path,
        f"duplicate {what} ({repeated[first]}, {repeated[second]}), first given on line {original}",
        repeated["line"],
    )


def read_trec_run(path: Path | str) -> pl.DataFrame:
    """Read a TREC run file into ``query_id, doc_id, score`` (file order kept).

    Format: ``qid Q0 docno rank score tag`` separated by spaces or tabs; blank lines are skipped.
    Errors: a line with other than 6 fields, a score that is not a finite number, a (query,
    document) pair given twice (trec_eval refuses those too), an empty file.
    """
    path = Path(path)
    run = _whitespace_table(
        path, RUN_COLUMNS, ("query_id", "doc_id", "score"), {"score": pl.Float64}
    )
    if run is not None:
        return run
    lines = _split_lines(path)
    if not lines.height:
        raise _fail(path, "run file has no lines")
    _check_field_count(lines, 6, path, "qid Q0 docno rank score tag")
    run = lines.select(
        "line",
        pl.col("fields").list.get(0).alias("query_id"),
        pl.col("fields").list.get(2).alias("doc_id"),
        pl.col("fields").list.get(4).alias("score_text"),
    ).with_columns(pl.col("score_text").cast(pl.Float64, strict=False).alias("score"))
    bad = _first_row(run, pl.col("score").is_null() | ~pl.col("score").is_finite())
    if bad is not None:
        raise _fail(path, f"score {bad['score_text']!r} is not a finite number", bad["line"])
    _check_unique_pairs(run, path, "query_id", "doc_id", "document for query")
    return run.select(list(RUN_SCHEMA)).cast(RUN_SCHEMA)


def _grades(frame: pl.DataFrame, path: Path) -> pl.DataFrame:
    parsed = frame.with_columns(pl.col("grade_text").cast(pl.Int64, strict=False).alias("grade"))
    bad = _first_row(parsed, pl.col("grade").is_null())
    if bad is not None:
        raise _fail(path, f"grade {bad['grade_text']!r} is not an integer", bad["line"])
    _check_unique_pairs(parsed, path, "query_id", "doc_id", "judgement for query and document")
    return parsed


def _judgements(
    lines: pl.DataFrame, path: Path, *, query: int, doc: int, grade: int
) -> pl.DataFrame:
    """Query id, document id and integer grade from the given field positions of each line."""
    qrels = lines.select(
        "line",
        pl.col("fields").list.get(query).alias("query_id"),
        pl.col("fields").list.get(doc).alias("doc_id"),
        pl.col("fields").list.get(grade).alias("grade_text"),
    )
    return _grades(qrels, path).select(list(QRELS_LINES_SCHEMA)).cast(QRELS_LINES_SCHEMA)


def _trec_qrels_lines(path: Path) -> pl.DataFrame:
    table = _whitespace_table(
        path,
        ("query_id", "iteration", "doc_id", "grade"),
        ("query_id", "doc_id", "grade"),
        {"grade": pl.Int64},
        numbered=True,
    )
    if table is not None:
        qrels = table.with_row_index("line", offset=1)
        return qrels.select(list(QRELS_LINES_SCHEMA)).cast(QRELS_LINES_SCHEMA)
    lines = _split_lines(path)
    if not lines.height:
        raise _fail(path, "qrels file has no lines")
    _check_field_count(lines, 4, path, "qid iter docno rel")
    return _judgements(lines, path, query=0, doc=2, grade=3)


def _qrels_table_lines(path: Path) -> pl.DataFrame:
    header = next((line for line in _read_text(path).split("\n") if line.strip()), "")
    lines = _split_lines(path, "\t" if "\t" in header else None)
    if not lines.height:
        raise _fail(path, "qrels table has no lines")
    _check_field_count(lines, 3, path, "header, then query id, document id, grade")
    body = lines.slice(1)
    if not body.height:
        raise _fail(path, "qrels table has a header but no judgements", lines["line"][0])
    return _judgements(body, path, query=0, doc=1, grade=2)


def _qrels_lines(path: Path) -> pl.DataFrame:
    first = next((line for line in _read_text(path).split("\n") if line.strip()), "")
    if len(first.split()) == 4:
        return _trec_qrels_lines(path)
    return _qrels_table_lines(path)


def read_trec_qrels(path: Path | str) -> pl.DataFrame:
    """Read TREC qrels into ``query_id, doc_id, grade``.

    Format: ``qid iter docno rel`` separated by spaces or tabs (``iter`` is ignored). Grades are
    integers and may be negative (trec_eval reads a negative grade as judged-but-unassessed).
    Errors: a line with other than 4 fields, a grade that is not an integer, a (query,
    document) pair judged twice, an empty file.
    """
    return _trec_qrels_lines(Path(path)).drop("line")


def read_qrels_table(path: Path | str) -> pl.DataFrame:
    """Read a qrels table with a header into ``query_id, doc_id, grade``.

    The first non-blank line is a header of three names (``qid docid grade``, BEIR's
    ``query-id corpus-id score``, or any other); columns are taken by position. Fields are split
    at tabs when the header has one (BEIR TSV), else at any whitespace. Errors as for
    ``read_trec_qrels``.
    """
    return _qrels_table_lines(Path(path)).drop("line")


def read_qrels(path: Path | str) -> pl.DataFrame:
    """Read TREC qrels (4 fields a line) or a qrels table with a header (3 fields), by layout."""
    return _qrels_lines(Path(path)).drop("line")


def _atomic_write_text(path: Path, text: str) -> None:
    """Write to a temporary file in the same folder, then rename over ``path``."""
    with replaced_atomically(path) as temporary:
        temporary.write_text(text, encoding="utf-8", newline="\n")


def trec_ranks(run: pl.DataFrame) -> pl.DataFrame:
    """The run sorted by query, then trec_eval's order (score desc, doc id desc), with ``rank``."""
    return run.sort(
        ["query_id", "score", "doc_id"], descending=[False, True, True], maintain_order=True
    ).with_columns(pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over("query_id").alias("rank"))


def write_trec_run(frame: pl.DataFrame, path: Path | str, tag: str) -> None:
    """Write ``query_id, doc_id, score`` as a TREC run file, ``qid Q0 docno rank score tag``.

    Ranks follow trec_eval: score descending, ties by doc id descending. Scores are written in
    the shortest form that reads back to the same float. The file is written to a temporary name
    and renamed, so a reader never sees half a run. Raises ``FormatError`` for a tag or id with
    whitespace, a missing or non-finite score, or a pair given twice.
    """
    path = Path(path)
    if not tag or re.search(r"\s", tag):
        raise FormatError(f"{path}: run tag {tag!r} must be non-empty without whitespace")
    run = frame.select(list(RUN_SCHEMA)).cast(RUN_SCHEMA).with_row_index("line", offset=1)
    for column in ("query_id", "doc_id"):
        bad = _first_row(run, pl.col(column).is_null() | pl.col(column).str.contains(r"^$|\s"))
        if bad is not None:
            raise FormatError(
                f"{path}: row {bad['line']} has {column} {bad[column]!r}; "
                "ids must be non-empty without whitespace"
            )
    bad = _first_row(run, pl.col("score").is_null() | ~pl.col("score").is_finite())
    if bad is not None:
        raise FormatError(f"{path}: row {bad['line']} has score {bad['score']!r}")
    _check_unique_pairs(run, path, "query_id", "doc_id", "document for query")
    lines = trec_ranks(run).select(
        pl.concat_str(
            [
                pl.col("query_id"),
                pl.lit("Q0"),
                pl.col("doc_id"),
                pl.col("rank").cast(pl.String),
                pl.col("score").cast(pl.String),
                pl.lit(tag),
            ],
            separator=" ",
        )
    )
    text = "\n".join(lines.to_series().to_list())
    _atomic_write_text(path, text + "\n" if text else "")


def _read_jsonl(path: Path, fields: Mapping[str, bool]) -> list[tuple[int, dict]]:
    """``(line, record)`` pairs of the file's non-blank lines (numbered as ``jsonl_lines`` does,
    a JSON error worded by ``json_line_problem``, as for golden sets); ``fields`` maps each
    field to whether it is required.

    Values are read as strings (a numeric id becomes its decimal text); a required field that is
    missing, null or not a string or number is an error naming the line.
    """
    records = []
    for number, text in jsonl_lines(_read_text(path)):
        try:
            record = json.loads(text)
        except json.JSONDecodeError as exc:
            raise _fail(path, json_line_problem(exc), number) from None
        if not isinstance(record, dict):
            raise _fail(path, f"expected a JSON object, got {type(record).__name__}", number)
        values = {}
        for name, required in fields.items():
            value = record.get(name)
            if isinstance(value, bool) or not isinstance(value, str | int | float | type(None)):
                raise _fail(path, f"field '{name}' must be a string", number)
            if value is None and required:
                raise _fail(path, f"record is missing the field '{name}'", number)
            values[name] = "" if value is None else str(value)
        records.append((number, values))
    if not records:
        raise _fail(path, "file has no records")
    return records


def _unique_ids(records: list[tuple[int, dict]], field: str, path: Path) -> None:
    seen: dict[str, int] = {}
    for number, record in records:
        if record[field] in seen:
            raise _fail(
                path, f"id {record[field]!r} already used on line {seen[record[field]]}", number
            )
        seen[record[field]] = number


def _corpus_frame(path: Path, id_field: str, text_field: str = "text") -> pl.DataFrame:
    records = _read_jsonl(path, {id_field: True, "title": False, text_field: False})
    _unique_ids(records, id_field, path)
    return pl.DataFrame(
        [{"doc_id": r[id_field], "title": r["title"], "text": r[text_field]} for _, r in records],
        schema=CORPUS_SCHEMA,
    )


def _queries_frame(path: Path, id_field: str) -> pl.DataFrame:
    records = _read_jsonl(path, {id_field: True, "text": True})
    _unique_ids(records, id_field, path)
    for number, record in records:
        if not record["text"].strip():
            raise _fail(path, f"query {record[id_field]!r} has an empty text", number)
    return pl.DataFrame(
        [{"query_id": r[id_field], "text": r["text"]} for _, r in records], schema=QUERY_SCHEMA
    )


def read_beir(folder: Path | str, qrels_path: Path | str | None = None) -> BeirCollection:
    """Read a BEIR folder: ``corpus.jsonl`` (``_id``, ``title``, ``text``), ``queries.jsonl``
    (``_id``, ``text``) and the qrels TSV (default ``qrels/test.tsv``, header
    ``query-id corpus-id score``)."""
    folder = Path(folder)
    qrels_file = Path(qrels_path) if qrels_path is not None else folder / "qrels" / "test.tsv"
    return BeirCollection(
        corpus=_corpus_frame(folder / "corpus.jsonl", "_id"),
        queries=_queries_frame(folder / "queries.jsonl", "_id"),
        qrels=read_qrels_table(qrels_file),
    )


def safe_doc_id(source_id: str) -> str:
    """A doc id the snapshot accepts: the source id when it matches the pattern, else the
    deterministic rewrite described in the module docstring (``_`` for other characters, then
    ``-`` and 8 hex digits of the source id's SHA-256)."""
    if DOC_ID_PATTERN.match(source_id):
        return source_id
    cleaned = re.sub(r"[^A-Za-z0-9_.:-]+", "_", source_id)
    if not cleaned[:1].isalnum() or not cleaned[:1].isascii():
        cleaned = "x" + cleaned
    suffix = hashlib.sha256(source_id.encode("utf-8")).hexdigest()[:8]
    return f"{cleaned}-{suffix}"


def grade_rule(qrels: pl.DataFrame) -> dict[int, int]:
    """The default source-grade -> golden-grade mapping for these qrels (module docstring):
    top grade -> 3, other positive grades -> 2, 0 -> 0; negative grades are left out."""
    grades = sorted(g for g in qrels["grade"].unique().to_list() if g >= 0)
    top = max(grades, default=0)
    return {g: 0 if g == 0 else TOP_GRADE if g == top else SUPPORTING_GRADE for g in grades}


def _document_file(doc_id: str, source_id: str, title: str, text: str, effective: dt.date) -> str:
    given_title = " ".join(title.split())
    body = normalise_text(text) or given_title or EMPTY_DOCUMENT_TEXT
    body = "\n".join(" " + line if line.startswith("## ") else line for line in body.split("\n"))
    front = {
        "doc_id": doc_id,
        "title": given_title or source_id,
        "version": 1,
        "effective_date": effective,
        "status": "current",
        "language": "en",
        "source_id": source_id,
    }
    header = yaml.safe_dump(front, sort_keys=False, allow_unicode=True, width=1_000_000)
    return f"---\n{header}---\n\n## {SECTION_HEADING}\n\n{body}\n"


def _doc_id_map(source_ids: list[str], where: Path | str) -> dict[str, str]:
    mapping: dict[str, str] = {}
    taken: dict[str, str] = {}
    for source_id in source_ids:
        if not source_id:
            raise FormatError(f"{where}: a document has an empty id")
        doc_id = safe_doc_id(source_id)
        if doc_id in taken:
            raise FormatError(
                f"{where}: documents {taken[doc_id]!r} and {source_id!r} both map to doc id "
                f"{doc_id!r}"
            )
        taken[doc_id] = source_id
        mapping[source_id] = doc_id
    return mapping


def _write_import(
    corpus: pl.DataFrame,
    build_items: Callable[[dict[str, str]], list[dict]],
    snapshot_dir: Path,
    golden_path: Path,
    labelled_against: str | None,
    effective_date: dt.date,
    source: Path | str,
    skipped_queries: int = 0,
) -> ImportReport:
    """Write documents, freeze, write the golden set, check it, then rename both into place.

    ``build_items(passage_of)`` returns golden records without ``labelled_against``, given the
    map from source doc id to passage id.
    """
    for target in (snapshot_dir, golden_path):
        if target.exists():
            raise FormatError(f"{target}: already exists; an import never overwrites")
    doc_ids = _doc_id_map(corpus["doc_id"].to_list(), source)
    passage_of = {source_id: passage_id(doc_id, 1, 1) for source_id, doc_id in doc_ids.items()}
    records = build_items(passage_of)

    snapshot_dir.parent.mkdir(parents=True, exist_ok=True)
    golden_path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{snapshot_dir.name}.", dir=snapshot_dir.parent))
    staged_golden = golden_path.with_name(f".{golden_path.name}.{staging.name}.tmp")
    try:
        staged_snapshot = staging / snapshot_dir.name
        documents = staged_snapshot / "documents"
        documents.mkdir(parents=True)
        for row in corpus.iter_rows(named=True):
            doc_id = doc_ids[row["doc_id"]]
            content = _document_file(
                doc_id, row["doc_id"], row["title"], row["text"], effective_date
            )
            (documents / f"{doc_id}@v1.md").write_text(content, encoding="utf-8")
        manifest = freeze_snapshot(staged_snapshot)
        pin = labelled_against or manifest["corpus_digest"]
        lines = [
            json.dumps({**record, "labelled_against": pin}, ensure_ascii=False)
            for record in records
        ]
        staged_golden.write_text("\n".join(lines) + "\n", encoding="utf-8")
        golden = load_golden_set(staged_golden)
        known = set(passage_of.values())
        unknown = golden.gold.filter(~pl.col("passage_id").is_in(list(known)))
        if unknown.height:
            raise FormatError(f"{source}: gold passage {unknown['passage_id'][0]!r} not written")
        if snapshot_dir.exists() or golden_path.exists():
            raise FormatError(f"{snapshot_dir}: appeared while importing; not overwritten")
        staged_snapshot.rename(snapshot_dir)
        os.replace(staged_golden, golden_path)
    finally:
        staged_golden.unlink(missing_ok=True)
        shutil.rmtree(staging, ignore_errors=True)
    answerable = sum(1 for record in records if record["stratum"] == ANSWERABLE)
    return ImportReport(
        snapshot_dir=snapshot_dir,
        golden_path=golden_path,
        corpus_digest=manifest["corpus_digest"],
        documents=corpus.height,
        items=len(records),
        answerable=answerable,
        no_answer=len(records) - answerable,
        skipped_queries=skipped_queries,
        doc_ids=doc_ids,
    )


def _judged_items(
    queries: pl.DataFrame,
    qrels: pl.DataFrame,
    grade_map: Mapping[int, int],
    passage_of: dict[str, str],
    qrels_source: Path | str,
) -> list[dict]:
    """Golden records for the queries that appear in the qrels (rules in the module docstring)."""
    known_queries = queries["query_id"].implode()
    missing_query = _first_row(qrels, ~pl.col("query_id").is_in(known_queries))
    if missing_query is not None:
        raise _fail(
            qrels_source,
            f"query {missing_query['query_id']!r} is judged but not in the queries file",
            missing_query["line"],
        )
    missing_doc = _first_row(qrels, ~pl.col("doc_id").is_in(pl.Series(list(passage_of)).implode()))
    if missing_doc is not None:
        raise _fail(
            qrels_source,
            f"document {missing_doc['doc_id']!r} is judged but not in the corpus",
            missing_doc["line"],
        )
    unmapped = _first_row(
        qrels, (pl.col("grade") >= 0) & ~pl.col("grade").is_in(pl.Series(list(grade_map)).implode())
    )
    if unmapped is not None:
        raise _fail(
            qrels_source,
            f"no golden grade given for source grade {unmapped['grade']}",
            unmapped["line"],
        )
    for source_grade, grade in grade_map.items():
        if not 0 <= grade <= TOP_GRADE:
            raise FormatError(f"grade_map sends {source_grade} to {grade}; grades are 0 to 3")
    judged = (
        qrels.filter(pl.col("grade") >= 0)
        .with_columns(
            pl.col("grade").replace_strict(dict(grade_map), return_dtype=pl.Int64),
            pl.col("doc_id").replace_strict(passage_of, return_dtype=pl.String),
        )
        .group_by("query_id", maintain_order=True)
        .agg(pl.struct(pl.col("doc_id").alias("passage_id"), "grade").alias("gold"))
    )
    gold_of = dict(zip(judged["query_id"].to_list(), judged["gold"].to_list(), strict=True))
    records = []
    for query_id, text in queries.iter_rows():
        gold = gold_of.get(query_id)
        if gold is None:
            continue
        answerable = any(entry["grade"] >= SUPPORTING_GRADE for entry in gold)
        records.append(
            {
                "id": query_id,
                "question": text,
                "language": "en",
                "stratum": ANSWERABLE if answerable else "out_of_scope",
                "gold": gold,
                "reference_answers": [],
                "must_mention": [],
            }
        )
    return records


def _import_judged(
    corpus: pl.DataFrame,
    queries: pl.DataFrame,
    qrels: pl.DataFrame,
    snapshot_dir: Path | str,
    golden_path: Path | str,
    labelled_against: str | None,
    effective_date: dt.date,
    grade_map: Mapping[int, int] | None,
    source: Path | str,
) -> ImportReport:
    mapping = dict(grade_map) if grade_map is not None else grade_rule(qrels)
    judged_queries = qrels.filter(pl.col("grade") >= 0)["query_id"].n_unique()
    return _write_import(
        corpus,
        lambda passage_of: _judged_items(queries, qrels, mapping, passage_of, source),
        Path(snapshot_dir),
        Path(golden_path),
        labelled_against,
        effective_date,
        source,
        skipped_queries=queries.height - judged_queries,
    )


def import_beir(
    folder: Path | str,
    snapshot_dir: Path | str,
    golden_path: Path | str,
    labelled_against: str | None = None,
    *,
    qrels_path: Path | str | None = None,
    effective_date: dt.date = DEFAULT_EFFECTIVE_DATE,
    grade_map: Mapping[int, int] | None = None,
) -> ImportReport:
    """Import a BEIR folder as a snapshot and a golden set (mapping in the module docstring).

    ``labelled_against`` defaults to the corpus digest the snapshot is frozen with.
    """
    folder = Path(folder)
    qrels_file = Path(qrels_path) if qrels_path is not None else folder / "qrels" / "test.tsv"
    return _import_judged(
        _corpus_frame(folder / "corpus.jsonl", "_id"),
        _queries_frame(folder / "queries.jsonl", "_id"),
        _qrels_table_lines(qrels_file),
        snapshot_dir,
        golden_path,
        labelled_against,
        effective_date,
        grade_map,
        qrels_file,
    )


def import_trec(
    docs_jsonl: Path | str,
    queries_jsonl: Path | str,
    qrels_path: Path | str,
    snapshot_dir: Path | str,
    golden_path: Path | str,
    labelled_against: str | None = None,
    *,
    effective_date: dt.date = DEFAULT_EFFECTIVE_DATE,
    grade_map: Mapping[int, int] | None = None,
) -> ImportReport:
    """Import a TREC-style collection (the Cranfield / Vaswani layout) as a snapshot and a
    golden set: ``docs.jsonl`` ``{id, title?, text}``, ``queries.jsonl`` ``{id, text}``, and
    qrels as a ``qid docid grade`` table with a header or as TREC qrels (``read_qrels``)."""
    qrels_path = Path(qrels_path)
    return _import_judged(
        _corpus_frame(Path(docs_jsonl), "id"),
        _queries_frame(Path(queries_jsonl), "id"),
        _qrels_lines(qrels_path),
        snapshot_dir,
        golden_path,
        labelled_against,
        effective_date,
        grade_map,
        qrels_path,
    )


def _squad_list(node: object, key: str, path: Path, where: str) -> list:
    value = node.get(key) if isinstance(node, dict) else None
    if not isinstance(value, list):
        raise _fail(path, f"{where}: expected a list under '{key}'")
    return value


def _squad_text(node: dict, key: str, path: Path, where: str) -> str:
    value = node.get(key)
    if not isinstance(value, str) or not value.strip():
        raise _fail(path, f"{where}: '{key}' must be a non-empty string")
    return value


def read_squad(path: Path | str) -> tuple[pl.DataFrame, list[dict]]:
    """Paragraphs (``doc_id, title, text``, source ids ``<title>_<n>``) and questions
    (``id, question, paragraph, answers, is_impossible``) of a SQuAD 2.0 JSON file.

    Errors name the file and the JSON location, e.g. ``data[3].paragraphs[2].qas[5]``.
    """
    path = Path(path)
    try:
        document = json.loads(_read_text(path))
    except json.JSONDecodeError as exc:
        raise _fail(path, json_problem(exc), exc.lineno) from None
    paragraphs: list[dict] = []
    questions: list[dict] = []
    seen: dict[str, str] = {}
    for a, article in enumerate(_squad_list(document, "data", path, "top level")):
        article_at = f"data[{a}]"
        title = _squad_text(article, "title", path, article_at)
        for p, paragraph in enumerate(_squad_list(article, "paragraphs", path, article_at)):
            paragraph_at = f"{article_at}.paragraphs[{p}]"
            source_id = f"{title}_{p}"
            context = _squad_text(paragraph, "context", path, paragraph_at)
            paragraphs.append(
                {"doc_id": source_id, "title": title.replace("_", " "), "text": context}
            )
            for q, qa in enumerate(_squad_list(paragraph, "qas", path, paragraph_at)):
                qa_at = f"{paragraph_at}.qas[{q}]"
                question_id = _squad_text(qa, "id", path, qa_at)
                if question_id in seen:
                    raise _fail(
                        path, f"{qa_at}: question id {question_id!r} also at {seen[question_id]}"
                    )
                seen[question_id] = qa_at
                impossible = qa.get("is_impossible", False)
                if not isinstance(impossible, bool):
                    raise _fail(path, f"{qa_at}: 'is_impossible' must be true or false")
                answers = []
                for n, answer in enumerate(_squad_list(qa, "answers", path, qa_at)):
                    answers.append(_squad_text(answer, "text", path, f"{qa_at}.answers[{n}]"))
                if not impossible and not answers:
                    raise _fail(
                        path, f"{qa_at}: answerable question {question_id!r} has no answers"
                    )
                questions.append(
                    {
                        "id": question_id,
                        "question": _squad_text(qa, "question", path, qa_at),
                        "paragraph": source_id,
                        "answers": list(dict.fromkeys(answers)),
                        "is_impossible": impossible,
                    }
                )
    if not paragraphs:
        raise _fail(path, "no paragraphs under 'data'")
    return pl.DataFrame(paragraphs, schema=CORPUS_SCHEMA), questions


def import_squad(
    squad_json_path: Path | str,
    snapshot_dir: Path | str,
    golden_path: Path | str,
    labelled_against: str | None = None,
    *,
    effective_date: dt.date = DEFAULT_EFFECTIVE_DATE,
) -> ImportReport:
    """Import a SQuAD 2.0 JSON file (official layout: ``data -> paragraphs -> context, qas``) as
    a snapshot of paragraphs and a golden set of its questions (mapping in the module
    docstring): answerable questions are ``answerable`` with their paragraph at grade 3,
    ``is_impossible`` ones are ``near_miss`` with their paragraph at grade 0."""
    paragraphs, questions = read_squad(squad_json_path)

    def build_items(passage_of: dict[str, str]) -> list[dict]:
        return [
            {
                "id": question["id"],
                "question": question["question"],
                "language": "en",
                "stratum": "near_miss" if question["is_impossible"] else ANSWERABLE,
                "gold": [
                    {
                        "passage_id": passage_of[question["paragraph"]],
                        "grade": 0 if question["is_impossible"] else TOP_GRADE,
                    }
                ],
                "reference_answers": [] if question["is_impossible"] else question["answers"],
                "must_mention": [],
            }
            for question in questions
        ]

    return _write_import(
        paragraphs,
        build_items,
        Path(snapshot_dir),
        Path(golden_path),
        labelled_against,
        effective_date,
        squad_json_path,
    )
