"""Corpus snapshots: documents parsed into versioned passages, pinned by a content digest.

A snapshot folder holds ``documents/<doc_id>@v<version>.md`` files (YAML front matter, then
``## `` sections) and a ``manifest.json`` written by ``rag-eval freeze``. Each section is one
retrievable passage with the stable id ``<doc_id>@v<version>#s<n>``, so a revised document yields
new ids and a golden item that points at the old version is visibly stale.

The content digest (``DIGEST_ALGORITHM``) is SHA-256 over a canonical serialisation of every
passage (id, text and the document metadata), one JSON line per passage sorted by passage id. It is
independent of file order, modification times and platform line endings. A document digest is the
same over one document version's passages alone; the manifest keeps them, so a mismatch names the
documents that changed.

Freezing and loading read each file's bytes once and hash them (the *file digest*, SHA-256 of the
raw bytes); a document whose file digest is already known (the parse cache of the snapshot store,
``lib.inputs.snapshot_store``) is not parsed again. Frozen snapshots are stored content-addressed
there: each document version's bytes once, each snapshot a manifest of document versions and their
digests, usually as the changes from the snapshot before it.
"""

import contextlib
import datetime as dt
import hashlib
import json
import os
import pickle
import re
import subprocess
import sys
import tempfile
import threading
import warnings
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import lru_cache, partial
from pathlib import Path

import orjson
import polars as pl
import yaml
from yaml.resolver import Resolver

from rag_eval_pipeline.lib.errors import InputError, named_few
from rag_eval_pipeline.lib.inputs import snapshot_store
from rag_eval_pipeline.lib.inputs.snapshot_store import SnapshotStore

DIGEST_ALGORITHM = "sha256:passage-jsonl:v1"
MANIFEST_NAME = snapshot_store.MANIFEST_NAME
DOCUMENT_STATUSES = ("current", "superseded", "withdrawn")
REQUIRED_KEYS = ("doc_id", "title", "version", "effective_date", "status", "language")
DOC_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$")
UTF8_BOM = "\ufeff"
# The largest version the tables hold (a 64-bit integer).
MAX_VERSION = 2**63 - 1
# Documents decoded together when the tables are read back from the canonical lines.
TABLE_SLICE = 2048

PASSAGE_SCHEMA = {
    "passage_id": pl.String,
    "doc_id": pl.String,
    "version": pl.Int64,
    "section": pl.Int64,
    "title": pl.String,
    "section_title": pl.String,
    "text": pl.String,
    "status": pl.String,
    "superseded_by": pl.String,
    "effective_date": pl.Date,
    "language": pl.String,
    "passage_digest": pl.String,
}
DOCUMENT_SCHEMA = {
    "doc_version_id": pl.String,
    "doc_id": pl.String,
    "version": pl.Int64,
    "title": pl.String,
    "status": pl.String,
    "superseded_by": pl.String,
    "effective_date": pl.Date,
    "language": pl.String,
    "owner": pl.String,
    "document_digest": pl.String,
}


class CorpusError(InputError):
    """A snapshot that cannot be loaded: the message names the file or document and the problem."""


# At most this many bad documents are named in one error's message (every one is in ``problems``).
NAMED_PROBLEMS = 5


class CorpusProblems(CorpusError):
    """Several documents that cannot be used, found in one pass over the folder: ``problems``
    holds every one's message (file, line, what is wrong) in file order; the message names the
    first few and the count, and ``rag-eval`` prints each on a line of its own."""

    def __init__(self, problems: Sequence[str]):
        self.problems = list(problems)
        shown = "; ".join(self.problems[1:NAMED_PROBLEMS])
        more = len(self.problems) - NAMED_PROBLEMS
        super().__init__(
            f"{self.problems[0]} (and {len(self.problems) - 1} more bad documents: {shown}"
            + (f"; and {more} more" if more > 0 else "")
            + ")"
        )

    def __reduce__(self):  # a worker process sends it back pickled
        return (CorpusProblems, (self.problems,))


def _messages(problems: Sequence[CorpusError]) -> list[str]:
    """Every document's message of ``problems`` (a ``CorpusProblems`` holds several)."""
    return [m for p in problems for m in getattr(p, "problems", None) or [str(p)]]


def raise_problems(problems: Sequence[CorpusError]) -> None:
    """Raise the documents' problems found in a pass: the one error itself, or all of them as
    ``CorpusProblems``; nothing when there are none."""
    messages = _messages(problems)
    if len(messages) == 1:
        raise problems[0]
    if messages:
        raise CorpusProblems(messages)


@dataclass(frozen=True)
class Document:
    """One version of one procedure document."""

    doc_id: str
    title: str
    version: int
    effective_date: dt.date
    status: str
    language: str
    sections: tuple[tuple[str, str], ...]
    superseded_by: str | None = None
    owner: str | None = None
    source: str = ""

    @property
    def version_id(self) -> str:
        return f"{self.doc_id}@v{self.version}"


@dataclass(frozen=True)
class Snapshot:
    """A loaded snapshot: its passages and documents as Polars frames and the digests that pin
    it. ``parsed`` counts the documents parsed from their bytes (the others came from the parse
    cache)."""

    snapshot_id: str
    corpus_digest: str
    passages: pl.DataFrame
    document_digests: dict[str, str]
    frozen_at: str | None = None
    document_table: pl.DataFrame | None = field(default=None, repr=False)
    file_digests: dict[str, str] = field(default_factory=dict, repr=False)
    parsed: int = 0

    @property
    def document_count(self) -> int:
        return len(self.document_digests)


def passage_id(doc_id: str, version: int, section: int) -> str:
    """The stable passage id, e.g. ``SPEC-LABEL-004@v3#s2``."""
    return f"{doc_id}@v{version}#s{section}"


def normalise_text(text: str) -> str:
    """Line endings to ``\\n``, trailing spaces stripped, outer blank lines removed.

    The outer white space is stripped first (the same as stripping it last: either way the text
    starts at its first character that is not white space and ends at its last). Splitting,
    stripping each line and joining is cheaper than deciding first that no line has to be
    stripped (eight substring searches of the whole text, measured on a 20,000-document
    library), so every text takes this one path."""
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return "\n".join([line.rstrip() for line in text.strip().split("\n")])


def _fail(source: str | Path, message: str, line: int | None = None) -> CorpusError:
    where = f"{source}:{line}" if line is not None else f"{source}"
    return CorpusError(f"{where}: {message}")


# -- front matter ------------------------------------------------------------------------------

# A front-matter line read without the YAML parser: ``key: value`` with a plain one-line value.
# Anything else (quotes, comments, flow or block collections, tags, anchors, characters YAML treats
# specially) goes to ``yaml.safe_load``, so the result is always what ``yaml.safe_load`` gives.
_SIMPLE_LINE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*):(?: +([^ ].*?))? *")
_UNSAFE_VALUE_START = frozenset("-?:,[]{}#&*!|>'\"%@`")
_UNSAFE_VALUE_CHARACTERS = re.compile(r"[:#\t\x85\u2028\u2029]")
_YAML_NON_PRINTABLE = yaml.reader.Reader.NON_PRINTABLE
# First characters for which YAML 1.1 may resolve a plain scalar to something other than a string
# (bool, int, float, null, timestamp, merge, value); other values are strings without asking.
_RESOLVABLE_START = frozenset("yYnNtTfFoO-+0123456789.<~=")
_NULL_WORDS = frozenset({"null", "Null", "NULL"})
_BOOL_WORDS = frozenset(
    [
        "yes",
        "Yes",
        "YES",
        "no",
        "No",
        "NO",
        "true",
        "True",
        "TRUE",
        "false",
        "False",
        "FALSE",
        "on",
        "On",
        "ON",
        "off",
        "Off",
        "OFF",
    ]
)
_DECIMAL = re.compile(r"0|[1-9][0-9]*")
_ISO_DATE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})")
_STR_TAG = "tag:yaml.org,2002:str"
_UNRESOLVED = object()


@lru_cache(maxsize=4096)
def _plain_scalar(value: str) -> object:
    """A plain one-line YAML scalar as ``yaml.safe_load`` constructs it, or ``_UNRESOLVED`` when
    only the YAML parser should decide (octal or sexagesimal ints, floats, bools, ...)."""
    if not value:
        return None
    if value[0] not in _RESOLVABLE_START:
        return value
    if value[0].isalpha():
        # Only YAML 1.1's exact bool and null words resolve to something else.
        if value in _NULL_WORDS:
            return None
        return _UNRESOLVED if value in _BOOL_WORDS else value
    tag = Resolver().resolve(yaml.ScalarNode, value, (True, False))
    if tag == _STR_TAG:
        return value
    if tag == "tag:yaml.org,2002:null":
        return None
    if tag == "tag:yaml.org,2002:int" and _DECIMAL.fullmatch(value):
        return int(value)
    date = _ISO_DATE.fullmatch(value)
    if tag == "tag:yaml.org,2002:timestamp" and date:
        try:
            return dt.date(int(date[1]), int(date[2]), int(date[3]))
        except ValueError:  # 2026-13-45: the YAML parser's error, which names the value, says so
            return _UNRESOLVED
    return _UNRESOLVED


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.safe_load``'s loader, but a key given twice in a mapping is an error (YAML says
    keys are unique; the parser would keep the last one, silently)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            self.flatten_mapping(node)
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                try:
                    duplicate = key in seen
                except TypeError:  # an unhashable key: the parser's own error says so
                    continue
                if duplicate:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"{key!r} given twice", key_node.start_mark
                    )
                seen.add(key)
        return super().construct_mapping(node, deep)


# Front-matter lines repeat across a library's documents ("status: current", "language: en",
# an owner): each distinct line is read once. The values are immutable (str, int, date, None).
@lru_cache(maxsize=8192)
def _simple_line(line: str) -> tuple[str, object] | None:
    """``(key, value)`` of a simple ``key: value`` front-matter line, as ``yaml.safe_load``
    reads it; None when the YAML parser has to read the front matter."""
    match = _SIMPLE_LINE.fullmatch(line)
    if match is None:
        return None
    key, value = match[1], match[2] or ""
    if value and (value[0] in _UNSAFE_VALUE_START or _UNSAFE_VALUE_CHARACTERS.search(value)):
        return None
    if _plain_scalar(key) != key:
        return None
    scalar = _plain_scalar(value)
    return None if scalar is _UNRESOLVED else (key, scalar)


def _simple_front_matter(lines: Sequence[str]) -> dict | None:
    """The front matter as a mapping when every line is a simple ``key: value`` and no key is
    given twice; else None (the YAML parser reads it, and names a repeated key's line)."""
    meta: dict = {}
    for line in lines:
        if not line:
            continue
        pair = _simple_line(line)
        if pair is None or pair[0] in meta:
            return None
        meta[pair[0]] = pair[1]
    return meta


def _invalid_value_line(lines: Sequence[str]) -> tuple[str, int]:
    """For a front matter the YAML parser refused with a ``ValueError``: `` (<line>)`` and the
    file's line number of the first line that alone gives that error, or nothing and line 2."""
    for number, line in enumerate(lines, 2):
        try:
            yaml.safe_load(line)
        except ValueError:
            return f" ({line.strip()})", number
        except yaml.YAMLError:
            continue
    return "", 2


def _yaml_problem(exc: yaml.YAMLError, text: str) -> tuple[str, int]:
    """The YAML parser's error with its places as the file's lines and columns (the front
    matter's first line is the file's line 2), and the line to name: where the construct the
    parser was reading began (an unclosed ``[``, a quote), else where it failed. Places are
    counted from the parser's character offset into ``text`` (the front matter), as the parser
    also ends lines at U+0085, U+2028 and U+2029, which the file does not."""

    def place(mark) -> tuple[int, int]:
        start = text.rfind("\n", 0, mark.index) + 1
        return text.count("\n", 0, mark.index) + 2, mark.index - start + 1

    marks = [
        (said, None if mark is None else place(mark))
        for said, mark in (
            (getattr(exc, "context", None), getattr(exc, "context_mark", None)),
            (getattr(exc, "problem", None), getattr(exc, "problem_mark", None)),
        )
        if said
    ]
    if not marks:
        return str(exc), 2
    parts = [said if at is None else f"{said} (line {at[0]}, column {at[1]})" for said, at in marks]
    line = next((at[0] for _, at in marks if at is not None), 2)
    return ": ".join(parts), line


def front_matter(lines: Sequence[str], source: str | Path) -> dict:
    """The front matter lines (between the ``---`` lines) as ``yaml.safe_load`` reads them.

    Simple ``key: value`` lines are read directly (about a hundred times faster); any other YAML
    goes through ``yaml.safe_load``, so the mapping is always the one the YAML parser gives.
    """
    text = "\n".join(lines)
    if not _YAML_NON_PRINTABLE.search(text):
        simple = _simple_front_matter(lines)
        if simple is not None:
            return simple
    try:
        meta = yaml.load(text, Loader=_UniqueKeyLoader) or {}  # a safe loader
    except yaml.YAMLError as exc:
        message, line = _yaml_problem(exc, text)
        raise _fail(source, f"front matter is not valid YAML: {message}", line) from None
    except ValueError as exc:  # e.g. a timestamp YAML matches but the calendar does not have
        line, number = _invalid_value_line(lines)
        raise _fail(source, f"front matter has an invalid value{line}: {exc}", number) from None
    if not isinstance(meta, dict):
        raise _fail(source, "front matter must be a mapping of keys to values", 2)
    return meta


# -- documents ---------------------------------------------------------------------------------


def _key_line(meta_lines: Sequence[str], key: str) -> int:
    """The file's line number of ``key:`` in the front matter (its first ``---`` is line 1), or
    line 1 when the key is not written there (missing, or inside other YAML)."""
    prefix = f"{key}:"
    return next((number for number, line in enumerate(meta_lines, 2) if line.startswith(prefix)), 1)


def parse_document(text: str, source: str | Path) -> Document:
    """Parse one document file; every error names the file (and the line where it helps).

    A UTF-8 byte order mark at the start is ignored.
    """
    if text.startswith(UTF8_BOM):
        text = text[1:]
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    # The front matter's lines are cut one by one up to the closing '---' line (line ``end``,
    # counted from 0); the body, all after it, is never split into lines.
    position = text.find("\n")
    if (text if position < 0 else text[:position]).strip() != "---":
        raise _fail(source, "document must start with a '---' front matter line", 1)
    meta_lines: list[str] = []
    end = None
    while position >= 0:
        start = position + 1
        position = text.find("\n", start)
        line = text[start:] if position < 0 else text[start:position]
        if line.strip() == "---":
            end = len(meta_lines) + 1
            break
        meta_lines.append(line)
    if end is None:
        raise _fail(source, "front matter is not closed by a '---' line", 1)
    meta = front_matter(meta_lines, source)

    def fail_at(key: str, message: str) -> CorpusError:
        return _fail(source, message, _key_line(meta_lines, key))

    for key in REQUIRED_KEYS:
        if meta.get(key) in (None, ""):
            what = "document without a version" if key == "version" else f"missing '{key}'"
            raise fail_at(key, f"{what} in front matter")
    doc_id = str(meta["doc_id"])
    if not DOC_ID_PATTERN.match(doc_id):
        raise fail_at("doc_id", f"doc_id {doc_id!r} has characters outside [A-Za-z0-9_.:-]")
    version = meta["version"]
    if isinstance(version, str) and version.lower().lstrip("v").isdigit():
        version = int(version.lower().lstrip("v"))
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise fail_at("version", f"version must be a positive integer, got {meta['version']!r}")
    if version > MAX_VERSION:
        raise fail_at("version", f"version {version} is too large (at most {MAX_VERSION})")
    status = str(meta["status"])
    if status not in DOCUMENT_STATUSES:
        raise fail_at("status", f"status {status!r} is not one of {', '.join(DOCUMENT_STATUSES)}")
    effective = meta["effective_date"]
    if isinstance(effective, str):
        try:
            effective = dt.date.fromisoformat(effective)
        except ValueError:
            raise fail_at(
                "effective_date", f"effective_date {effective!r} is not YYYY-MM-DD"
            ) from None
    if not isinstance(effective, dt.date):
        raise fail_at("effective_date", f"effective_date {effective!r} is not YYYY-MM-DD")

    body = "" if position < 0 else text[position + 1 :]
    # A section begins at each line that starts with "## ": the body cut at them is the text
    # before the first heading, then each section's heading line and text.
    if body.startswith("## "):
        preamble, parts = "", body[3:].split("\n## ")
    else:
        preamble, *parts = body.split("\n## ")
    if preamble.strip():
        offset = next(i for i, line in enumerate(preamble.split("\n")) if line.strip())
        raise _fail(source, "text before the first '## ' section heading", end + 2 + offset)
    sections: list[tuple[str, str]] = []
    for part in parts:
        title, _, content = part.partition("\n")
        sections.append((title.strip(), normalise_text(content)))
    if not sections:
        raise _fail(source, "document has no '## ' sections")
    for index, (title, content) in enumerate(sections, start=1):
        if not content:
            raise _fail(source, f"section {index} ({title!r}) is empty")

    superseded_by = meta.get("superseded_by")
    return Document(
        doc_id=doc_id,
        title=str(meta["title"]),
        version=version,
        effective_date=effective,
        status=status,
        language=str(meta["language"]),
        sections=tuple(sections),
        superseded_by=str(superseded_by) if superseded_by else None,
        owner=str(meta["owner"]) if meta.get("owner") else None,
        source=str(source),
    )


# -- the canonical serialisation and the digests -------------------------------------------------

# ``json.dumps(record, sort_keys=True, ensure_ascii=False, separators=(",", ":"))`` encodes
# strings with exactly this function; building the line from it gives the same bytes faster.
_json_string = json.encoder.encode_basestring
_dumps = orjson.dumps


def _json_text(text: str) -> str:
    """``_json_string(text)`` for a section's text. A text without a quote or a backslash whose
    only control characters are newlines (once they are escaped nothing is left that is not
    printable) needs only its newlines escaped, which ``str.replace`` does about a quarter
    faster; any other text takes ``_json_string`` (a non-printable character that JSON keeps
    as it is, such as a no-break space, only means the slower path)."""
    if '"' not in text and "\\" not in text:
        escaped = text.replace("\n", "\\n")
        if escaped.isprintable():
            return f'"{escaped}"'
    return _json_string(text)


def canonical_lines(document: Document) -> list[str]:
    """The canonical JSON line of each section, in section order.

    Each line is ``json.dumps`` of ``{passage_id, doc_id, version, status, superseded_by,
    effective_date, language, title, section_title, text}`` with sorted keys, no spaces and
    non-ASCII kept, titles and text normalised (``normalise_text``).
    """
    sections = [(normalise_text(title), normalise_text(text)) for title, text in document.sections]
    return _canonical_lines(document, sections)


def _line_parts(document: Document) -> tuple[str, str, str]:
    """What every canonical line of ``document`` has before its section number, between its
    section title and its text, and after its text."""
    head = (
        '{"doc_id":'
        + _json_string(document.doc_id)
        + ',"effective_date":'
        + _json_string(document.effective_date.isoformat())
        + ',"language":'
        + _json_string(document.language)
        + ',"passage_id":'
        + _json_string(f"{document.doc_id}@v{document.version}#s")[:-1]
    )
    middle = (
        ',"status":'
        + _json_string(document.status)
        + ',"superseded_by":'
        + ("null" if document.superseded_by is None else _json_string(document.superseded_by))
        + ',"text":'
    )
    tail = (
        ',"title":'
        + _json_string(normalise_text(document.title))
        + ',"version":'
        + str(document.version)
        + "}"
    )
    return head, middle, tail


def _canonical_lines(document: Document, sections: Sequence[tuple[str, str]]) -> list[str]:
    """``canonical_lines`` of a document whose ``sections`` are normalised already (as parsed)."""
    head, middle, tail = _line_parts(document)
    return [
        f'{head}{number}","section_title":{_json_string(title)}{middle}{_json_text(text)}{tail}'
        for number, (title, text) in enumerate(sections, start=1)
    ]


# Per document version: what the digests, the manifest and the tables are built from. The parse
# cache of the snapshot store keeps these rows by file digest.
CANONICAL_SCHEMA = {
    "doc_version_id": pl.String,
    "title": pl.String,
    "owner": pl.String,
    "status": pl.String,
    "document_digest": pl.String,
    "block": pl.String,
    "passage_digests": pl.List(pl.String),
}
_LINE_FIELDS = {
    "doc_id": pl.String,
    "effective_date": pl.String,
    "language": pl.String,
    "passage_id": pl.String,
    "section_title": pl.String,
    "status": pl.String,
    "superseded_by": pl.String,
    "text": pl.String,
    "title": pl.String,
    "version": pl.Int64,
}
_LINE_SCHEMA = pl.Struct(_LINE_FIELDS)


def canonical_row(document: Document, lines: Sequence[str] | None = None) -> dict:
    """The document's row of ``CANONICAL_SCHEMA``: its block (canonical lines sorted by passage
    id), document digest and passage digests, with what the tables need beyond the lines (the
    title as written, the owner)."""
    if lines is None:
        lines = canonical_lines(document)
    block, document_digest, passage_digests = _block_of(lines)
    return {
        "doc_version_id": document.version_id,
        "title": document.title,
        "owner": document.owner,
        "status": document.status,
        "document_digest": document_digest,
        "block": block,
        "passage_digests": passage_digests,
    }


def _in_passage_id_order(lines: Sequence) -> Sequence:
    """A document's lines (one per section, in section order) in passage id order: up to nine
    sections, their numbers sort as strings in section order; from ten, ``#s10`` comes before
    ``#s2``."""
    if len(lines) <= 9:
        return lines
    numbers = map(str, range(1, len(lines) + 1))
    return [line for _, line in sorted(zip(numbers, lines, strict=True))]


def _encoded_block(
    document: Document, sections: Sequence[tuple[str, str]]
) -> tuple[bytes, str, str]:
    """``_block_of(_canonical_lines(document, sections))`` built as UTF-8 bytes: the block, its
    SHA-256 and its lines' SHA-256s joined by spaces. Each title and text is JSON-escaped by
    ``orjson``, whose string encoding is byte for byte ``_json_string``'s with non-ASCII kept
    (every code point alone and mixed strings of every length are checked in the tests), about
    three times faster on long texts and already UTF-8, so no line is encoded or split again."""
    head, middle, tail = (part.encode("utf-8") for part in _line_parts(document))
    lines = [
        b'%s%d","section_title":%s%s%s%s'
        % (head, number, _dumps(title), middle, _dumps(text), tail)
        for number, (title, text) in enumerate(sections, start=1)
    ]
    lines = _in_passage_id_order(lines)
    block = b"\n".join(lines)
    passage_digests = " ".join([hashlib.sha256(line).hexdigest() for line in lines])
    return block, hashlib.sha256(block).hexdigest(), passage_digests


def _block_of(lines: Sequence[str]) -> tuple[str, str, list[str]]:
    """A document's block (its canonical lines sorted by passage id, joined by newlines), the
    block's SHA-256 and each line's, in block order. A canonical line has no newline (JSON
    escapes it), so the lines' bytes are the block's bytes split at its newlines."""
    lines = _in_passage_id_order(lines)
    block = "\n".join(lines)
    data = block.encode("utf-8")
    passage_digests = [hashlib.sha256(line).hexdigest() for line in data.split(b"\n")]
    return block, hashlib.sha256(data).hexdigest(), passage_digests


def canonical_frame(rows: Sequence[dict] | pl.DataFrame) -> pl.DataFrame:
    """Rows of ``CANONICAL_SCHEMA`` as a frame sorted by version id."""
    frame = rows if isinstance(rows, pl.DataFrame) else pl.DataFrame(rows, schema=CANONICAL_SCHEMA)
    return frame.select(list(CANONICAL_SCHEMA)).sort("doc_version_id")


def digest_of(canonical: pl.DataFrame) -> str:
    """The corpus digest of a canonical frame sorted by version id.

    The passage ids of one document version (``<doc>@v<n>#s<k>``) sort next to each other, and
    their blocks sort in the order of the version ids (doc ids have no ``@`` or ``#``, versions
    no leading zeros), so the blocks joined by newlines in version-id order are every canonical
    line sorted by passage id, exactly what ``DIGEST_ALGORITHM`` hashes.
    """
    total = hashlib.sha256()
    blocks = canonical["block"].cast(pl.Binary)
    for start in range(0, blocks.len(), 4096):
        for position, block in enumerate(blocks.slice(start, 4096).to_list(), start):
            if position:
                total.update(b"\n")
            total.update(block)
    return total.hexdigest()


def tables_of(canonical: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The passages (``PASSAGE_SCHEMA``, sorted by passage id) and documents
    (``DOCUMENT_SCHEMA``) frames, read back from the canonical lines themselves, so the staged
    rows are exactly what the digest pins (``passage_slices``, joined)."""
    slices = list(passage_slices(canonical))
    passages = pl.concat(slices) if slices else _passages_of(canonical)
    return passages, _documents_of(canonical)


def passage_slices(canonical: pl.DataFrame) -> Iterator[pl.DataFrame]:
    """The passages of ``canonical`` (``PASSAGE_SCHEMA``) decoded ``TABLE_SLICE`` documents at
    a time, in passage id order: ``canonical`` is sorted by version id and each block's lines
    by passage id, so its lines in order are already sorted by passage id (``digest_of``). A
    caller that writes each slice before asking for the next never holds the whole table."""
    for start in range(0, canonical.height, TABLE_SLICE):
        yield _passages_of(canonical.slice(start, TABLE_SLICE))


_DECODED = pl.col("line").str.json_decode(_LINE_SCHEMA).alias("fields")


def _passages_of(canonical: pl.DataFrame) -> pl.DataFrame:
    return (
        canonical.lazy()
        .select(
            pl.col("title").alias("raw_title"),
            pl.col("block").str.split("\n").alias("line"),
            pl.col("passage_digests").alias("passage_digest"),
        )
        .explode("line", "passage_digest")
        .select("raw_title", "passage_digest", _DECODED)
        .unnest("fields")
        .select(
            "passage_id",
            "doc_id",
            "version",
            pl.col("passage_id").str.extract(r"#s([0-9]+)$").cast(pl.Int64).alias("section"),
            pl.col("raw_title").alias("title"),
            "section_title",
            "text",
            "status",
            "superseded_by",
            pl.col("effective_date").str.to_date("%Y-%m-%d"),
            "language",
            "passage_digest",
        )
        .cast(PASSAGE_SCHEMA)
        .collect()
    )


# The fields of a canonical line before its text (keys sorted: all a document's own fields but its
# title, which the documents table takes as written, and its version, which the passage id holds).
_HEAD_SCHEMA = pl.Struct({name: dtype for name, dtype in _LINE_FIELDS.items() if name < "text"})
# A block's first line up to its text: ``,"text":`` cannot occur earlier in the line, as a quote
# inside a JSON string is escaped. Decoding this head rather than the whole first line (whose
# text is most of it) makes the documents table 0.1 s on 20,000 documents instead of 0.3-0.45 s.
_HEAD = r'^(\{.*?),"text":'


def _documents_of(canonical: pl.DataFrame) -> pl.DataFrame:
    return (
        canonical.lazy()
        .select(
            "doc_version_id",
            pl.col("title").alias("raw_title"),
            "owner",
            "document_digest",
            (pl.col("block").str.extract(_HEAD) + "}").str.json_decode(_HEAD_SCHEMA).alias("head"),
        )
        .unnest("head")
        .select(
            "doc_version_id",
            "doc_id",
            pl.col("passage_id").str.extract(r"@v([0-9]+)#s[0-9]+$").alias("version"),
            pl.col("raw_title").alias("title"),
            "status",
            "superseded_by",
            pl.col("effective_date").str.to_date("%Y-%m-%d"),
            "language",
            "owner",
            "document_digest",
        )
        .cast(DOCUMENT_SCHEMA)
        .collect()
    )


def passages_of(documents: Iterable[Document]) -> pl.DataFrame:
    """One row per passage, sorted by passage id, with each passage's canonical digest."""
    return tables_of(canonical_frame([canonical_row(d) for d in documents]))[0]


def corpus_digest(documents: Iterable[Document]) -> tuple[str, dict[str, str]]:
    """The corpus digest and the per-document digests (keyed by ``doc_id@vN``).

    Convention: each passage is serialised as canonical JSON (sorted keys, normalised text);
    the corpus digest is SHA-256 over those lines sorted by passage id and joined by newlines.
    A document digest is the same over that document's passages alone.
    """
    canonical = canonical_frame([canonical_row(d) for d in documents])
    return digest_of(canonical), dict(canonical.select("doc_version_id", "document_digest").rows())


# -- reading a snapshot folder -------------------------------------------------------------------


@dataclass(frozen=True)
class DocumentFile:
    """One document file as read: its bytes, their SHA-256 (the file digest) and its inode.

    The file's path is kept as a string (``location``), a ``Path`` made only when asked for:
    making one is about 10 microseconds of pathlib, a fifth of reading a 7 KB file."""

    location: str
    version_id: str
    data: bytes | None
    file_digest: str
    inode: tuple[int, int]
    links: int
    size: int
    symlink: bool = False
    # The file's modification time as read (nanoseconds): with the inode and the size, how the
    # store tells that the file it links is still the one that was read (``SnapshotStore``).
    modified_ns: int | None = None

    @property
    def path(self) -> Path:
        return Path(self.location)

    def content(self) -> bytes:
        """The bytes that were hashed: kept, or read again and checked against the digest."""
        if self.data is not None:
            return self.data
        try:
            data, _ = _read_whole(self.location)
        except OSError as exc:
            raise _fail(self.path, f"cannot be read: {exc.strerror}") from None
        if hashlib.sha256(data).hexdigest() != self.file_digest:
            raise _fail(self.path, "changed while the snapshot was being read")
        return data

    def text(self) -> str:
        """The file as text; a file that is not UTF-8 fails naming the file and the byte."""
        try:
            return self.content().decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _fail(
                self.path, f"not UTF-8 text ({exc.reason} at byte offset {exc.start})"
            ) from None


def _read_whole(path: Path | str) -> tuple[bytes, os.stat_result]:
    """A file's bytes and its status, in four system calls (open, fstat, read, close) where
    ``open(path, "rb").read()`` and an ``fstat`` make six: one read of one byte more than its
    size gets a regular file whole; a file that turns out longer or shorter is read to its
    end."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        status = os.fstat(descriptor)
        data = os.read(descriptor, status.st_size + 1)
        if len(data) != status.st_size:
            pieces = [data]
            while piece := os.read(descriptor, 1 << 20):
                pieces.append(piece)
            data = b"".join(pieces)
    finally:
        os.close(descriptor)
    return data, status


def read_document_file(
    path: Path | str, snapshot_dir: Path, symlink: bool | None = None, keep: bool = True
) -> DocumentFile:
    """Read and hash one file of ``documents/`` (keeping its bytes unless ``keep`` is False); a
    symbolic link leading outside the snapshot is refused."""
    symlink = os.path.islink(path) if symlink is None else symlink
    if symlink:
        target = Path(os.path.realpath(path))
        if not target.is_relative_to(Path(os.path.realpath(snapshot_dir))):
            raise _fail(
                path,
                f"symbolic link to {target}, outside the snapshot: a snapshot holds its own "
                "files (copy the document into documents/ instead)",
            )
    try:
        data, status = _read_whole(path)
    except OSError as exc:
        raise _fail(path, f"cannot be read: {exc.strerror}") from None
    location = os.fspath(path)
    return DocumentFile(
        location,
        os.path.basename(location).removesuffix(".md"),
        data if keep else None,
        hashlib.sha256(data).hexdigest(),
        (status.st_dev, status.st_ino),
        status.st_nlink,
        len(data),
        symlink,
        status.st_mtime_ns,
    )


def _document_names(snapshot_dir: Path) -> list[tuple[str, bool]]:
    """The ``documents/*.md`` files of a snapshot folder, sorted by name, each with whether it is
    a symbolic link. Hidden names (``._X@v1.md``, the AppleDouble file a Mac copy leaves beside
    each file) are not documents."""
    folder = snapshot_dir / "documents"
    if not folder.is_dir():
        raise _fail(snapshot_dir, "snapshot has no 'documents/' folder")
    with os.scandir(folder) as entries:
        found = sorted(
            (entry.name, entry.is_symlink())
            for entry in entries
            if entry.name.endswith(".md") and not entry.name.startswith(".")
        )
    if not found:
        raise _fail(folder, "no '*.md' documents found")
    return found


def left_out_warnings(snapshot_dir: Path) -> tuple[str, ...]:
    """A warning for each entry of ``documents/`` that a snapshot leaves out: a file not named
    ``*.md`` (``X@v1.MD``, ``notes.txt``) or a folder. Hidden names (``.DS_Store``, an editor's
    swap file) are left out without a word."""
    folder = snapshot_dir / "documents"
    warnings_found = []
    with os.scandir(folder) as entries:
        left_out = [
            entry
            for entry in entries
            if not entry.name.startswith(".") and (not entry.name.endswith(".md") or entry.is_dir())
        ]
        for entry in sorted(left_out, key=lambda entry: entry.name):
            if entry.is_dir():
                what = "a folder: documents/ is read without its subfolders"
            elif entry.name.lower().endswith(".md"):
                what = f"not named *.md: rename it to {entry.name[:-3]}.md to include it"
            else:
                what = "not a *.md document"
            warnings_found.append(f"{folder / entry.name}: left out of the snapshot ({what})")
    return tuple(warnings_found)


def read_files(snapshot_dir: Path, *, keep: bool = True) -> list[DocumentFile]:
    """Every ``documents/*.md`` file of a snapshot folder, read and hashed once, by name (the
    bytes kept in memory unless ``keep`` is False: a file is then read again only to parse it)."""
    folder = os.path.join(snapshot_dir, "documents")
    return [
        read_document_file(os.path.join(folder, name), snapshot_dir, link, keep)
        for name, link in _document_names(snapshot_dir)
    ]


def parse_file(document_file: DocumentFile) -> Document:
    """Parse one read file, checking that its name is its ``doc_id@vN``."""
    document = parse_document(document_file.text(), document_file.location)
    if document_file.version_id != document.version_id:
        raise _fail(
            document_file.path, f"file name should be {document.version_id}.md for its front matter"
        )
    return document


def _check_versions(documents: Sequence[Document], folder: Path) -> None:
    """One file per document version and at most one current version per document."""
    seen: dict[str, str] = {}
    current: dict[str, list[str]] = {}
    for document in documents:
        if document.version_id in seen:
            raise _fail(
                document.source,
                f"{document.version_id} is also defined in {seen[document.version_id]}",
            )
        seen[document.version_id] = document.source
        if document.status == "current":
            current.setdefault(document.doc_id, []).append(document.version_id)
    for doc_id, versions in current.items():
        if len(versions) > 1:
            raise _fail(
                folder, f"{doc_id} has more than one current version: {', '.join(versions)}"
            )


def read_documents(snapshot_dir: Path) -> list[Document]:
    """Parse every document of a snapshot folder, checking ids, versions and duplicates."""
    documents = [parse_file(document_file) for document_file in read_files(Path(snapshot_dir))]
    _check_versions(documents, Path(snapshot_dir) / "documents")
    return documents


def _check_canonical(canonical: pl.DataFrame, folder: Path) -> None:
    """One file per document version and at most one current version per document."""
    versions = canonical["doc_version_id"].to_list()
    if len(set(versions)) < len(versions):
        repeated = canonical.filter(pl.col("doc_version_id").is_duplicated())
        version_id = repeated["doc_version_id"][0]
        raise _fail(folder, f"{version_id} is defined by more than one file")
    current = (
        canonical.filter(pl.col("status") == "current")
        .with_columns(pl.col("doc_version_id").str.extract(r"^(.*)@v[0-9]+$").alias("doc_id"))
        .group_by("doc_id")
        .agg(pl.col("doc_version_id").sort())
        .filter(pl.col("doc_version_id").list.len() > 1)
        .sort("doc_id")
    )
    if current.height:
        doc_id, both = current.row(0)
        raise _fail(folder, f"{doc_id} has more than one current version: {', '.join(both)}")


@dataclass(frozen=True)
class _Resolved:
    """Every file's canonical row (``canonical``, sorted by version id, with ``file_digest``)
    and the rows that were parsed from their bytes rather than found in the parse cache."""

    canonical: pl.DataFrame
    parsed: pl.DataFrame


def _cached_rows(
    files: Callable[[], Sequence[DocumentFile]], store: SnapshotStore | None
) -> pl.DataFrame | None:
    """The parse cache's rows of the files ``files()`` gives (those whose file digest it holds
    for the same version), or None without a store or cache. ``files`` is called once the
    cache's first part is read (``SnapshotStore.cached_rows``)."""
    if store is None:
        return None

    def wanted() -> pl.DataFrame:
        listed = files()
        return pl.DataFrame(
            {
                "file_digest": [f.file_digest for f in listed],
                "doc_version_id": [f.version_id for f in listed],
            },
            schema={"file_digest": pl.String, "doc_version_id": pl.String},
        )

    return store.cached_rows(wanted, CANONICAL_SCHEMA)


def _files_and_cached_rows(
    read: Callable[[], list[DocumentFile]], store: SnapshotStore | None
) -> tuple[list[DocumentFile], pl.DataFrame | None]:
    """``read()`` (a snapshot's files, read and hashed) and their ``_cached_rows``, the parse
    cache checked and its first part read on a thread while the files are read: Polars reads
    and decompresses without holding the GIL, and reading the files is mostly system calls
    (a 20,000-document load: about 0.25 s less)."""
    if store is None or not store.has_cached_rows():
        return read(), None
    files_read: Future = Future()
    with ThreadPoolExecutor(1) as pool:
        cached = pool.submit(_cached_rows, files_read.result, store)
        files = None
        try:
            files = read()
        finally:
            # However ``read`` ends (an error, an interrupt), the thread stops waiting: with the
            # files, or with an error of its own that nobody asks for (the caller gets read's).
            if files is None:
                files_read.set_exception(_FilesNotRead())
            else:
                files_read.set_result(files)
        return files, cached.result()


class _FilesNotRead(Exception):
    """Given to a thread waiting for files that were not read (``_files_and_cached_rows``)."""


def _resolve(
    files: Sequence[DocumentFile],
    folder: Path,
    cached: pl.DataFrame | None,
    parsed: pl.DataFrame | None = None,
) -> _Resolved:
    """Each file's canonical row: from the parse cache's rows ``cached`` (``_cached_rows``) when
    its file digest is there, else parsed (``parsed``: every file's rows, parsed already). Every
    file is checked before anything is returned."""
    if parsed is None:
        # A hit is a file's digest under its own name: a copy of a cached file under another
        # name (``X@v1 (copy).md``) is parsed, and fails for its name as it would uncached.
        hits = (
            set()
            if cached is None
            else set(zip(cached["file_digest"], cached["doc_version_id"], strict=True))
        )
        parsed = parse_rows([f for f in files if (f.file_digest, f.version_id) not in hits])
    canonical = parsed if cached is None or not cached.height else cached
    if cached is not None and cached.height and parsed.height:
        canonical = pl.concat([parsed, cached], how="vertical")
    if not canonical["doc_version_id"].is_sorted():
        canonical = canonical.sort("doc_version_id")
    _check_canonical(canonical, folder / "documents")
    return _Resolved(canonical, parsed)


def _read_and_resolve(
    snapshot_dir: Path, store: SnapshotStore | None
) -> tuple[list[DocumentFile], _Resolved]:
    """``read_files`` and ``_resolve``, for a freeze. When the parse cache is empty (or there is
    no store) every file is parsed anyway, so each is read, hashed and parsed in one pass, on
    every core (``read_and_parse``); the bytes are not kept (``DocumentFile.content`` reads a
    file again if it has to be copied into the store)."""
    if store is not None and store.has_cached_rows():
        files, cached = _files_and_cached_rows(lambda: read_files(snapshot_dir), store)
        return files, _resolve(files, snapshot_dir, cached)
    files, parsed = read_and_parse(snapshot_dir)
    return files, _resolve(files, snapshot_dir, None, parsed)


# -- parsing many files --------------------------------------------------------------------------

# Below this many files to parse, they are parsed in this process alone: a worker process costs
# about 0.3-0.5 s to start (an interpreter importing this module), more than it saves.
PARALLEL_PARSE_MIN = 2000
# Files handed out at a time, to a worker process or to this process.
PARSE_CHUNK = 400
_ROWS_SCHEMA = {"file_digest": pl.String, **CANONICAL_SCHEMA}
# A chunk's rows hold each document's passage digests as one string, separated by spaces (a
# list per row is slow to build from Python); ``_rows_of`` splits them.
_CHUNK_SCHEMA = {**_ROWS_SCHEMA, "passage_digests": pl.String}


def _parsed_chunk(files: Sequence[DocumentFile]) -> tuple[pl.DataFrame, list[DocumentFile]]:
    """The rows of read files (``_CHUNK_SCHEMA``, in file order), and no files. Every file is
    parsed: the bad ones are all reported, in file order (``raise_problems``)."""
    frame, problems = _parsed_rows(files)
    raise_problems([problem for _, problem in problems])
    return frame, []


def _parsed_rows(
    files: Sequence[DocumentFile],
) -> tuple[pl.DataFrame, list[tuple[int, CorpusError]]]:
    """The rows of the files that parse (``_CHUNK_SCHEMA``, in file order), and each bad file's
    error with its position in ``files``."""
    rows, problems = [], []
    for position, document_file in enumerate(files):
        try:
            document = parse_file(document_file)
        except CorpusError as problem:
            problems.append((position, problem))
            continue
        block, document_digest, passage_digests = _encoded_block(document, document.sections)
        rows.append(
            (
                document_file.file_digest,
                document.version_id,
                document.title,
                document.owner,
                document.status,
                document_digest,
                block,
                passage_digests,
            )
        )
    columns = zip(*rows, strict=True) if rows else [[] for _ in _ROWS_SCHEMA]
    # The blocks come as UTF-8 bytes; Polars takes them as they are and checks them as text.
    frame = pl.DataFrame(
        dict(zip(_ROWS_SCHEMA, map(list, columns), strict=True)),
        schema={**_CHUNK_SCHEMA, "block": pl.Binary},
    ).with_columns(pl.col("block").cast(pl.String))
    return frame, problems


def _rows_of(outcomes: Sequence[tuple[pl.DataFrame, list]]) -> pl.DataFrame:
    """The rows of the chunks (``_ROWS_SCHEMA``), in chunk order."""
    frames = [rows for rows, _ in outcomes]
    rows = pl.concat(frames, how="vertical") if len(frames) > 1 else frames[0]
    return rows.with_columns(pl.col("passage_digests").str.split(" "))


def _read_and_parsed_chunk(
    task: tuple[Path, Sequence[tuple[str, bool]]],
) -> tuple[pl.DataFrame, list[DocumentFile]]:
    """The rows of the named files of ``documents/`` (``task``: the snapshot folder and
    ``_document_names``' entries), read and hashed here, and the files as read (without their
    bytes)."""
    snapshot_dir, names = task
    folder = os.path.join(snapshot_dir, "documents")
    files, positions, problems = [], [], []
    for position, (name, link) in enumerate(names):
        try:
            files.append(read_document_file(os.path.join(folder, name), snapshot_dir, link))
            positions.append(position)
        except CorpusError as problem:
            problems.append((position, problem))
    rows, parse_problems = _parsed_rows(files)
    problems.extend((positions[index], problem) for index, problem in parse_problems)
    # In file order: a file that could not be read was not parsed.
    raise_problems([problem for _, problem in sorted(problems, key=lambda pair: pair[0])])
    return rows, [replace(f, data=None) for f in files]


def parse_rows(files: Sequence[DocumentFile]) -> pl.DataFrame:
    """Parse read files into their canonical rows (``file_digest`` and ``CANONICAL_SCHEMA``, in
    file order), on every core for many files (``_on_every_core``), failing as parsing them one
    by one would: with the error of the first bad file. A worker process is sent only the files'
    names and digests: it reads each again and checks its digest (``DocumentFile.content``)."""
    if len(files) < PARALLEL_PARSE_MIN:
        return _rows_of([_parsed_chunk(files)])
    chunks = [files[start : start + PARSE_CHUNK] for start in range(0, len(files), PARSE_CHUNK)]
    outcomes = _on_every_core(
        _parsed_chunk, chunks, [[replace(f, data=None) for f in chunk] for chunk in chunks]
    )
    return _rows_of(outcomes)


def read_and_parse(snapshot_dir: Path) -> tuple[list[DocumentFile], pl.DataFrame]:
    """``read_files`` (without keeping the bytes) and their ``parse_rows`` in one pass, on every
    core for many files; the first bad file in order (unreadable or not a valid document) is the
    one reported."""
    names = _document_names(snapshot_dir)
    step = PARSE_CHUNK if len(names) >= PARALLEL_PARSE_MIN else len(names)
    tasks = [(snapshot_dir, names[start : start + step]) for start in range(0, len(names), step)]
    outcomes = _on_every_core(_read_and_parsed_chunk, tasks, tasks)
    files = [document_file for _, chunk_files in outcomes for document_file in chunk_files]
    return files, _rows_of(outcomes)


def _parse_workers(tasks: int) -> int:
    """Worker processes to share ``tasks`` chunks with: one per further core this process may
    run on, none for a single chunk."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(0, min((cores or 1) - 1, tasks - 1))


def _on_every_core(function, tasks: Sequence, worker_tasks: Sequence) -> list:
    """``[function(task) for task in tasks]`` (each a pair: rows and a list), computed on every
    core, raising the ``CorpusError`` of every task that fails, in task order (``raise_problems``).

    Worker processes (``python -c`` importing this module alone, see ``_parse_worker``) are
    handed tasks from the front, one at a time (``worker_tasks``: the same tasks as sent to them,
    e.g. without the bytes already read), and this process computes tasks from the back until
    none is left, so a worker that starts late or runs slowly is simply given less. A worker
    writes its rows to a file of a scratch folder (a pipe would pass megabytes in 64 KiB pieces,
    each waiting for this busy process to let the thread that reads it run). A worker that fails
    leaves its task to this process, which then fails the same way, with its traceback; one that
    cannot be started is done without. The results are the same, in the same order, however the
    tasks were shared out.
    """
    workers = _parse_workers(len(tasks))
    if not workers:
        outcomes = []
        for task in tasks:
            try:
                outcomes.append(function(task))
            except CorpusError as problem:
                outcomes.append(problem)
        raise_problems([outcome for outcome in outcomes if isinstance(outcome, CorpusError)])
        return outcomes
    waiting = deque(range(len(tasks)))
    outcomes: list = [None] * len(tasks)

    def compute_from_back() -> None:
        while waiting:
            try:
                index = waiting.pop()
            except IndexError:  # a worker took the last one
                return
            try:
                outcomes[index] = function(tasks[index])
            except CorpusError as problem:
                outcomes[index] = problem

    with tempfile.TemporaryDirectory(prefix="rag-eval-parse-") as scratch:
        processes = []
        for _ in range(workers):
            with contextlib.suppress(OSError):  # no worker: this process computes more
                processes.append(
                    subprocess.Popen(
                        _PARSE_WORKER_COMMAND, stdin=subprocess.PIPE, stdout=subprocess.PIPE
                    )
                )
        feeders = [
            threading.Thread(
                target=_feed_worker,
                args=(process, function, worker_tasks, waiting, outcomes, Path(scratch)),
            )
            for process in processes
        ]
        try:
            for feeder in feeders:
                feeder.start()
            compute_from_back()
            for feeder in feeders:
                feeder.join()
            compute_from_back()  # the tasks a failed worker left
        finally:
            for process in processes:
                with contextlib.suppress(OSError):  # a worker that died cannot be written to
                    process.stdin.close()
                if process.poll() is None and any(feeder.is_alive() for feeder in feeders):
                    process.kill()
                process.wait()
            for feeder in feeders:
                feeder.join()
    raise_problems([outcome for outcome in outcomes if isinstance(outcome, CorpusError)])
    return outcomes


def _feed_worker(
    process: subprocess.Popen,
    function,
    tasks: Sequence,
    waiting: deque,
    outcomes: list,
    scratch: Path,
) -> None:
    """Hand the tasks at the front of ``waiting`` to a worker process one at a time, keeping
    its outcomes; a task the worker does not answer (it failed) goes back to ``waiting``."""
    while waiting:
        try:
            index = waiting.popleft()
        except IndexError:
            return
        rows_file = scratch / f"{index}.arrow"
        try:
            pickle.dump((function, tasks[index], str(rows_file)), process.stdin, protocol=5)
            process.stdin.flush()
            reply = pickle.load(process.stdout)
        except (OSError, EOFError, pickle.UnpicklingError):
            waiting.appendleft(index)
            return
        outcomes[index] = (
            reply if isinstance(reply, CorpusError) else (pl.read_ipc(rows_file), reply)
        )


_PARSE_WORKER_COMMAND = [
    sys.executable,
    "-c",
    f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parents[3])!r}); "
    f"import {__name__} as corpus; corpus._parse_worker()",
]


def _parse_worker() -> None:
    """A worker process of ``_on_every_core``: for each pickled ``(function, task, rows file)``
    read from stdin, write the rows of ``function(task)`` to the rows file (Arrow IPC) and the
    list beside them to stdout, pickled, or the ``CorpusError`` instead; until stdin is closed.
    Anything printed goes to stderr."""
    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr
    while True:
        try:
            function, task, rows_file = pickle.load(requests)
        except EOFError:
            return
        try:
            rows, listed = function(task)
            rows.write_ipc(rows_file)
            reply = listed
        except CorpusError as problem:
            reply = problem
        pickle.dump(reply, replies, protocol=pickle.HIGHEST_PROTOCOL)
        replies.flush()


# -- manifests ---------------------------------------------------------------------------------


def read_manifest(snapshot_dir: Path) -> dict:
    """The snapshot's manifest as written, checked for its keys (``documents`` a mapping)."""
    path = Path(snapshot_dir) / MANIFEST_NAME
    if not path.is_file():
        if not (Path(snapshot_dir) / "documents").is_dir():
            raise _fail(
                snapshot_dir,
                f"neither {MANIFEST_NAME} nor documents/: not a snapshot (put its markdown "
                "files in documents/, then 'rag-eval freeze' it)",
            )
        raise _fail(snapshot_dir, f"no {MANIFEST_NAME}: freeze it first with 'rag-eval freeze'")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise _fail(path, f"not valid JSON: {exc.msg}", exc.lineno) from None
    except UnicodeDecodeError as exc:
        raise _fail(path, f"not UTF-8 text ({exc.reason} at byte offset {exc.start})") from None
    try:
        return snapshot_store.checked_manifest(manifest)
    except ValueError as problem:
        raise _fail(path, str(problem)) from None


def resolved_manifest(snapshot_dir: Path) -> tuple[dict, dict[str, dict], SnapshotStore | None]:
    """The manifest, every document version's entry (a delta manifest applied to its bases), and
    the snapshot store it names (None for a manifest without one)."""
    snapshot_dir = Path(snapshot_dir)
    manifest = read_manifest(snapshot_dir)
    store = snapshot_store.store_of(snapshot_dir, manifest)
    try:
        entries = snapshot_store.resolve_entries(manifest, store, folder=snapshot_dir)
    except ValueError as problem:
        raise _fail(snapshot_dir / MANIFEST_NAME, str(problem)) from None
    return manifest, entries, store


def _changed_versions(frozen: dict[str, str], document_digests: dict[str, str]) -> list[str]:
    """The version ids in both whose document digest is not the frozen one, sorted."""
    return sorted(
        k for k in frozen.keys() & document_digests.keys() if frozen[k] != document_digests[k]
    )


def _describe_mismatch(frozen: dict[str, str], document_digests: dict[str, str]) -> str:
    changed = _changed_versions(frozen, document_digests)
    missing = sorted(frozen.keys() - document_digests.keys())
    added = sorted(document_digests.keys() - frozen.keys())
    parts = []
    if changed:
        parts.append(f"changed: {', '.join(changed)}")
    if missing:
        parts.append(f"missing: {', '.join(missing)}")
    if added:
        parts.append(f"not in manifest: {', '.join(added)}")
    return "; ".join(parts) or "document digests agree but the corpus digest differs"


def _shared_edit_note(
    files: Sequence[DocumentFile], frozen: dict[str, str], document_digests: dict[str, str]
) -> str:
    """For changed documents whose file has other hard links (the store's copy, and the same
    file in every snapshot frozen from a copy of this one): they were edited in place, perhaps
    through another snapshot's folder, so say so, and how to keep it from happening."""
    changed = set(_changed_versions(frozen, document_digests))
    shared = [f for f in files if f.links > 1 and f.version_id in changed]
    if not shared:
        return ""
    named = named_few([f"{f.path.name} ({f.links} links)" for f in shared])
    share = "shares its" if len(shared) == 1 else "share their"
    return (
        f". Edited in place: {named} {share} bytes with the store's copy and with the "
        "same file in every other snapshot frozen with those bytes, so an edit through any of "
        "them changes them all. Put the frozen bytes back (a checkout of this snapshot), and "
        "edit a writable copy instead: cp -r <snapshot> <new> && chmod -R u+w <new>/documents"
    )


def _refreeze_note(snapshot_dir: Path) -> str:
    """What to do about a snapshot whose files changed since its freeze (not through a link
    shared with other snapshots: ``_shared_edit_note`` says that case)."""
    return (
        f". If the change is meant, freeze the snapshot again (rag-eval freeze {snapshot_dir}); "
        "otherwise put its frozen files back (a checkout of this snapshot)"
    )


@dataclass(frozen=True)
class SnapshotFiles:
    """A snapshot folder as read, nothing parsed: its manifest, every document version's
    manifest entry (a delta manifest applied to its bases), its store, and its files with their
    file digests."""

    folder: Path
    manifest: dict
    entries: dict[str, dict]
    store: SnapshotStore | None
    files: list[DocumentFile]
    # ``[the parse cache's rows of the files]`` when they were read with them, until the
    # verification that uses them takes them (so they are not held while tables are staged).
    cached_rows: list = field(default_factory=list, repr=False)

    @property
    def file_digests(self) -> dict[str, str]:
        """``doc_id@vN -> SHA-256 of the file's bytes``."""
        return {f.version_id: f.file_digest for f in self.files}


def _stored_files(
    snapshot_dir: Path, entries: dict[str, dict], store: SnapshotStore
) -> list[DocumentFile]:
    """The files of a snapshot folder without ``documents/``: the stored objects it lists. An
    object whose bytes are not the ones it is named by (damaged, or edited in place through a
    hard link) fails, naming each such object (at most five) and how to store it again."""
    files, damaged = [], []
    for version_id, entry in sorted(entries.items()):
        digest = entry.get("sha256")
        path = store.object_path(digest) if isinstance(digest, str) else None
        if path is None or not path.is_file():
            raise _fail(
                snapshot_dir / MANIFEST_NAME,
                f"{version_id}: no documents/ file and no stored copy {digest} in {store.root}",
            )
        stored = read_document_file(path, path.parent)
        if stored.file_digest != digest:
            damaged.append(f"{version_id} ({path})")
            continue
        files.append(
            replace(
                stored,
                location=os.path.join(snapshot_dir, "documents", f"{version_id}.md"),
                version_id=version_id,
            )
        )
    if damaged:
        raise _fail(
            snapshot_dir / MANIFEST_NAME,
            f"no documents/ folder, and the stored copy of {named_few(damaged)} no "
            "longer has the bytes it is named by (damaged, or edited in place through a hard "
            "link): freeze a folder holding the version's frozen file (a checkout of this "
            "snapshot's documents/) to store it again",
        )
    return files


def read_snapshot(
    snapshot_dir: Path | str, *, parse_cache: Callable[[dict], bool] | None = None
) -> SnapshotFiles:
    """Read a frozen snapshot's manifest and files (each file read and hashed once).

    ``parse_cache``, called with the manifest, says whether the files' rows of the parse cache
    will be wanted (the snapshot is to be verified in full): they are then read beside the files
    (``_files_and_cached_rows``) and kept with them."""
    snapshot_dir = Path(snapshot_dir)
    manifest, entries, store = resolved_manifest(snapshot_dir)
    if manifest["snapshot_id"] != snapshot_dir.name:
        # A night takes the folder by its name (its date); its figures would carry another,
        # and a copy of a staged snapshot would pass for it by its file digests alone.
        raise _fail(
            snapshot_dir / MANIFEST_NAME,
            f"frozen as snapshot {manifest['snapshot_id']!r}, but the folder is "
            f"{snapshot_dir.name!r}: a snapshot copied or renamed from another is frozen under "
            f"its own name before a night uses it (rag-eval freeze {snapshot_dir})",
        )
    if not (snapshot_dir / "documents").is_dir() and store is not None and entries:
        read = partial(_stored_files, snapshot_dir, entries, store)
    else:
        read = partial(read_files, snapshot_dir, keep=False)
    if parse_cache is not None and parse_cache(manifest):
        files, cached = _files_and_cached_rows(read, store)
        return SnapshotFiles(snapshot_dir, manifest, entries, store, files, [cached])
    return SnapshotFiles(snapshot_dir, manifest, entries, store, read())


@dataclass(frozen=True)
class VerifiedSnapshot:
    """A snapshot folder read and verified against its manifest digest, before its tables are
    built: the canonical rows (``CANONICAL_SCHEMA``, sorted by version id) and what pins them.
    ``passage_slices`` and ``documents`` decode the tables from the canonical lines."""

    snapshot_id: str
    corpus_digest: str
    canonical: pl.DataFrame = field(repr=False)
    document_digests: dict[str, str] = field(repr=False)
    frozen_at: str | None = None
    file_digests: dict[str, str] = field(default_factory=dict, repr=False)
    parsed: int = 0

    def passage_slices(self) -> Iterator[pl.DataFrame]:
        return passage_slices(self.canonical)

    def documents(self) -> pl.DataFrame:
        return _documents_of(self.canonical)

    def passage_counts(self, documents: pl.DataFrame) -> tuple[int, int]:
        """``(passages, current passages)``, counted from the canonical rows and their
        ``documents`` (the frame ``documents()`` returned, row for row), without decoding a
        passage."""
        sections = self.canonical["passage_digests"].list.len()
        current = (documents["status"] == "current").fill_null(False)
        return int(sections.sum() or 0), int(sections.filter(current).sum() or 0)


def verify_snapshot(
    snapshot_dir: Path | str, *, verify: bool = True, read: SnapshotFiles | None = None
) -> VerifiedSnapshot:
    """Read a snapshot folder and verify it against its manifest digest (``load_snapshot``
    without building its tables).

    Each file is read and hashed once; documents whose file digest is in the snapshot store's
    parse cache are not parsed again. Raises ``CorpusError`` naming the manifest and the
    documents that changed when the files no longer match the digest they were frozen with (a
    stored file edited in place fails the same way). ``read`` is the folder as already read
    (``read_snapshot``); ``verify=False`` reads the documents alone, without a manifest.
    """
    snapshot_dir = Path(snapshot_dir)
    if verify:
        read = read or read_snapshot(snapshot_dir)
        files, store = read.files, read.store
    else:
        files, store = read_files(snapshot_dir), None
    if verify and read.cached_rows:
        cached = read.cached_rows.pop()
    else:
        cached = _cached_rows(lambda: files, store)
    resolved = _resolve(files, snapshot_dir, cached)
    digest = digest_of(resolved.canonical)
    document_digests = dict(resolved.canonical.select("doc_version_id", "document_digest").rows())
    frozen_at = None
    snapshot_id = snapshot_dir.name
    if verify:
        if read.manifest["corpus_digest"] != digest:
            frozen = {key: value["digest"] for key, value in read.entries.items()}
            said, now = read.manifest["corpus_digest"], digest
            shown = 12 if said[:12] != now[:12] else len(now)  # never two equal prefixes
            raise _fail(
                snapshot_dir / MANIFEST_NAME,
                f"snapshot files no longer match the manifest digest "
                f"{said[:shown]} (now {now[:shown]}): "
                f"{_describe_mismatch(frozen, document_digests)}"
                f"{_shared_edit_note(files, frozen, document_digests) or _refreeze_note(snapshot_dir)}",
            )
        frozen_at = read.manifest.get("frozen_at")
        snapshot_id = read.manifest["snapshot_id"]
    return VerifiedSnapshot(
        snapshot_id=snapshot_id,
        corpus_digest=digest,
        canonical=resolved.canonical,
        document_digests=document_digests,
        frozen_at=frozen_at,
        file_digests={f.version_id: f.file_digest for f in files},
        parsed=resolved.parsed.height,
    )


def load_snapshot(
    snapshot_dir: Path | str, *, verify: bool = True, read: SnapshotFiles | None = None
) -> Snapshot:
    """Load a snapshot folder and verify it against its manifest digest (``verify_snapshot``),
    with its passages and documents as frames."""
    verified = verify_snapshot(snapshot_dir, verify=verify, read=read)
    passages, document_table = tables_of(verified.canonical)
    return Snapshot(
        snapshot_id=verified.snapshot_id,
        corpus_digest=verified.corpus_digest,
        passages=passages,
        document_digests=verified.document_digests,
        frozen_at=verified.frozen_at,
        document_table=document_table,
        file_digests=verified.file_digests,
        parsed=verified.parsed,
    )


@dataclass(frozen=True)
class FreezeReport:
    """What a freeze wrote: the manifest (every document listed), how many documents were
    parsed (the others came from the parse cache), and the bytes newly stored."""

    manifest: dict
    parsed: int
    stored_bytes: int
    warnings: tuple[str, ...] = ()


def freeze(
    snapshot_dir: Path | str,
    frozen_at: str | None = None,
    *,
    store: SnapshotStore | bool | None = True,
) -> FreezeReport:
    """Freeze a snapshot folder: its manifest with the corpus digest and every document
    version's digests, and (with a store) its files stored content-addressed.

    ``store`` is the snapshot store (``True``: ``<corpus root>/.snapshot_store`` beside the
    folder; ``None`` or ``False``: write only a manifest listing every document, as before the
    store existed). With a store, each document version's bytes are kept once (the files in
    ``documents/`` become hard links to the stored copies), documents whose bytes were frozen
    before are not parsed again, and the manifest lists only the changes from the snapshot before
    it when they are few (``lib.inputs.snapshot_store``).

    Every file is read, checked and parsed before anything is written, so bad input writes
    nothing; the manifest is written to a temporary name and renamed, so a failed freeze leaves
    the previous manifest in place.
    """
    snapshot_dir = Path(snapshot_dir)
    if store is True:
        store = SnapshotStore.beside(snapshot_dir)
    elif store is False:
        store = None
    files, resolved = _read_and_resolve(snapshot_dir, store)
    canonical = resolved.canonical
    # Every file is checked by now. The parse cache's new part (compressed and written by
    # Polars) and the corpus digest (hashlib) let other threads run, so both go on threads at
    # once, beside the entries, the storing of the files and the manifest (system calls,
    # mostly) on this one: at 20,000 documents the cache part alone is 0.5 s.
    with ThreadPoolExecutor(2) as background:
        cache_written = (
            background.submit(store.add_cached_rows, resolved.parsed) if store is not None else None
        )
        corpus_digest = background.submit(digest_of, canonical)
        by_version = {
            version_id: (status, digest)
            for version_id, status, digest in canonical.select(
                "doc_version_id", "status", "document_digest"
            ).iter_rows()
        }
        entries = {
            f.version_id: {
                "file": f"documents/{f.version_id}.md",
                "status": by_version[f.version_id][0],
                "digest": by_version[f.version_id][1],
                **({"sha256": f.file_digest, "bytes": f.size} if store else {}),
            }
            for f in files
        }
        parsed = resolved.parsed.height
        warned = (
            *left_out_warnings(snapshot_dir),
            *successor_warnings(canonical),
            *metadata_warnings(canonical, snapshot_dir),
            *name_warnings(snapshot_dir),
        )
        stored, problems = (
            (0, [])
            if store is None
            else store.add_files(
                files,
                _previous_entries(snapshot_dir, store),
                set(resolved.parsed["file_digest"].to_list()),
            )
        )
        header = {
            "snapshot_id": snapshot_dir.name,
            "digest_algorithm": DIGEST_ALGORITHM,
            "corpus_digest": corpus_digest.result(),
            "frozen_at": frozen_at or dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat(),
            "document_count": len(files),
            "passage_count": int(canonical["passage_digests"].list.len().sum()),
        }
        if store is None:
            snapshot_store.write_manifest(snapshot_dir, {**header, "documents": entries})
            return FreezeReport({**header, "documents": entries}, parsed, 0, warned)
        written = snapshot_store.write_store_manifest(snapshot_dir, store, header, entries)
        cache_written.result()
    manifest = {**written, "documents": entries}
    manifest.pop("removed", None)
    return FreezeReport(manifest, parsed, stored, (*warned, *problems))


# A block's first ``superseded_by`` value (every line of a block has the same one).
_SUCCESSOR = r'"superseded_by":"([^"\\]*)"'


_EFFECTIVE = r'"effective_date":"([0-9-]*)"'
_LANGUAGE = r'"language":"((?:[^"\\]|\\.)*)"'
_LANGUAGE_TAG = r"^[A-Za-z]{2,3}(-[A-Za-z0-9]{1,8})*$"


def _named(rows: pl.DataFrame, describe) -> str:
    """At most five rows described, then the count of the rest."""
    named = ", ".join(describe(*row) for row in rows.head(5).iter_rows())
    return named + (f" and {rows.height - 5} more" if rows.height > 5 else "")


def metadata_warnings(canonical: pl.DataFrame, snapshot_dir: Path) -> tuple[str, ...]:
    """Warnings for front matter that parses but is likely a mistake: a version ``current`` in
    a snapshot dated before its ``effective_date`` (not yet in force, yet retrieved as current),
    and a ``language`` that is no language tag (``en``, ``de-CH``; the golden items' tags are
    what figures are grouped by). At most five are named each, with the count."""
    found = []
    fields = canonical.select(
        "doc_version_id",
        "status",
        effective=pl.col("block").str.extract(_EFFECTIVE),
        language=pl.col("block").str.extract(_LANGUAGE),
    )
    try:
        dated = dt.date.fromisoformat(Path(snapshot_dir).name)
    except ValueError:
        dated = None
    if dated is not None:
        early = fields.filter(
            (pl.col("status") == "current") & (pl.col("effective") > dated.isoformat())
        ).select("doc_version_id", "effective")
        if early.height:
            found.append(
                f"{early.height} current document version(s) take effect after the snapshot's "
                f"date {dated}: " + _named(early, lambda version, day: f"{version} ({day})")
            )
    odd = fields.filter(~pl.col("language").str.contains(_LANGUAGE_TAG)).select(
        "doc_version_id", "language"
    )
    if odd.height:
        found.append(
            f"{odd.height} document version(s) have a language that is no language tag (en, "
            "de-CH): " + _named(odd, lambda version, language: f"{version} ({language!r})")
        )
    return tuple(found)


def successor_warnings(canonical: pl.DataFrame) -> tuple[str, ...]:
    """Warnings for ``superseded_by`` values that cannot be right: one naming no document
    version of the snapshot (a typo, or a successor not yet added: a superseded version keeps
    pointing at what replaced it, which the snapshot should hold), one naming the version
    itself, and one on a version that is ``current`` (replaced, yet retrieved as current). At
    most five are named each, with the count."""
    successors = canonical.select(
        "doc_version_id", "status", successor=pl.col("block").str.extract(_SUCCESSOR)
    ).filter(pl.col("successor").is_not_null())
    kinds = (
        (
            "name a superseded_by that is no document version of this snapshot",
            ~pl.col("successor").is_in(canonical["doc_version_id"].implode()),
        ),
        ("name themselves as superseded_by", pl.col("successor") == pl.col("doc_version_id")),
        ("are current yet name a superseded_by", pl.col("status") == "current"),
    )
    found = []
    for said, which in kinds:
        rows = successors.filter(which).select("doc_version_id", "successor")
        if rows.height:
            named = _named(rows, lambda version, successor: f"{version} -> {successor}")
            found.append(f"{rows.height} document version(s) {said}: {named}")
    return tuple(found)


def name_warnings(snapshot_dir: Path) -> tuple[str, ...]:
    """A warning when the folder's name is no date: a suite with ``snapshot: auto`` takes the
    newest dated folder on or before the night, so it never takes this one (only a suite
    naming it in ``snapshot:`` does)."""
    try:
        dt.date.fromisoformat(Path(snapshot_dir).name)
    except ValueError:
        return (
            f"{snapshot_dir}: the folder's name is no date (YYYY-MM-DD): a suite with "
            "snapshot: auto never takes it; name it for the day it stands for, or name it in "
            "the suite's snapshot:",
        )
    return ()


def freeze_snapshot(
    snapshot_dir: Path | str,
    frozen_at: str | None = None,
    *,
    store: SnapshotStore | bool | None = True,
) -> dict:
    """``freeze`` and return the manifest with every document listed (warnings as warnings)."""
    report = freeze(snapshot_dir, frozen_at, store=store)
    for problem in report.warnings:
        warnings.warn(problem, stacklevel=2)
    return report.manifest


def _previous_entries(snapshot_dir: Path, store: SnapshotStore) -> dict[str, dict]:
    """The entries this folder was frozen with before, if it was (to spot files edited in place
    while they were hard links to their stored copy)."""
    try:
        manifest = read_manifest(snapshot_dir)
        return snapshot_store.resolve_entries(manifest, store, folder=snapshot_dir)
    except (CorpusError, ValueError, OSError):
        return {}


def snapshot_folders(corpus_root: Path | str) -> list[tuple[dt.date, Path]]:
    """The dated snapshot folders of a corpus root (named ``YYYY-MM-DD``), oldest first."""
    dated = []
    for folder in Path(corpus_root).iterdir():
        if not folder.is_dir():
            continue
        try:
            dated.append((dt.date.fromisoformat(folder.name), folder))
        except ValueError:
            continue
    return sorted(dated)


def choose_snapshot(
    corpus_root: Path | str, on_date: dt.date | None, requested: str = "auto"
) -> Path:
    """The snapshot folder to evaluate on.

    ``requested`` names a snapshot folder, or ``auto``: the newest snapshot whose id (an ISO date)
    is on or before ``on_date`` (the partition date), so a back-filled night uses the library as it
    stood that night.
    """
    corpus_root = Path(corpus_root)
    if not corpus_root.is_dir():
        raise CorpusError(f"{corpus_root}: the corpus root is not a folder")
    if requested != "auto":
        folder = corpus_root / requested
        if not folder.is_dir():
            raise CorpusError(f"{folder}: snapshot folder does not exist")
        return folder
    dated = snapshot_folders(corpus_root)
    eligible = [item for item in dated if on_date is None or item[0] <= on_date]
    if not eligible:
        if dated:
            seen = f"the earliest is {dated[0][1].name}"
        else:
            others = sorted(
                f.name for f in corpus_root.iterdir() if f.is_dir() and not f.name.startswith(".")
            )
            seen = "no folder is named YYYY-MM-DD" + (
                f" (folders: {', '.join(others[:5])})" if others else ""
            )
        raise CorpusError(f"{corpus_root}: no snapshot dated on or before {on_date}; {seen}")
    return eligible[-1][1]


def snapshot_tables(snapshot: Snapshot, loaded_at: dt.datetime) -> dict[str, pl.DataFrame]:
    """The rows kept for one snapshot, keyed by table: ``corpus_snapshots`` (one row,
    ``snapshot_summary``), ``corpus_documents`` and ``corpus_passages``, each carrying the
    corpus digest."""
    digest = snapshot.corpus_digest
    passages = snapshot.passages.with_columns(pl.lit(digest).alias("corpus_digest"))
    documents = snapshot.document_table.with_columns(pl.lit(digest).alias("corpus_digest"))
    summary = snapshot_summary(
        snapshot,
        passage_count=passages.height,
        current_passage_count=passages.filter(pl.col("status") == "current").height,
        loaded_at=loaded_at,
    )
    return {"corpus_snapshots": summary, "corpus_documents": documents, "corpus_passages": passages}


def snapshot_summary(
    snapshot: Snapshot | VerifiedSnapshot,
    *,
    passage_count: int,
    current_passage_count: int,
    loaded_at: dt.datetime,
) -> pl.DataFrame:
    """The ``corpus_snapshots`` row of a snapshot."""
    return pl.DataFrame(
        [
            {
                "corpus_digest": snapshot.corpus_digest,
                "snapshot_id": snapshot.snapshot_id,
                "document_count": len(snapshot.document_digests),
                "passage_count": passage_count,
                "current_passage_count": current_passage_count,
                "frozen_at": snapshot.frozen_at,
                "loaded_at": loaded_at,
            }
        ]
    )


def _frozen_snapshots(corpus_root: Path | str) -> Iterator[tuple[Path, str]]:
    """``(folder, corpus digest)`` of every snapshot under ``corpus_root`` with a readable
    manifest, by folder name (read from the manifests; nothing is parsed)."""
    root = Path(corpus_root)
    if not root.is_dir():
        return
    for manifest in sorted(root.glob(f"*/{MANIFEST_NAME}")):
        try:
            frozen = json.loads(manifest.read_text(encoding="utf-8")).get("corpus_digest")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(frozen, str):
            yield manifest.parent, frozen


def find_snapshot(corpus_root: Path | str, corpus_digest: str) -> Path | None:
    """The snapshot folder under ``corpus_root`` frozen with ``corpus_digest``, if any."""
    return next(
        (folder for folder, frozen in _frozen_snapshots(corpus_root) if frozen == corpus_digest),
        None,
    )


def snapshot_names(corpus_root: Path | str) -> dict[str, str]:
    """``corpus digest -> snapshot folder name`` of the frozen snapshots of ``corpus_root``."""
    return {frozen: folder.name for folder, frozen in _frozen_snapshots(corpus_root)}


def frozen_digests(corpus_root: Path | str) -> set[str]:
    """The corpus digests the snapshots under ``corpus_root`` were frozen with (an unreadable
    manifest is left out)."""
    return {frozen for _, frozen in _frozen_snapshots(corpus_root)}
