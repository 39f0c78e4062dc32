"""Golden sets: labelled questions with graded gold passages, validated against a snapshot.

One JSON object a line with ``id``, ``question``, ``language``, ``stratum``, ``gold`` (a list of
``{passage_id, grade}``; 3 = current answering section, 2 = supporting, 1 = superseded version,
0 = judged irrelevant), ``reference_answers``, ``must_mention`` and ``labelled_against``.
A no-answer item (any stratum but ``answerable``) has empty ``reference_answers`` and
``must_mention`` and no gold passage of grade 2 or 3. ``labelled_against`` names the snapshot the
gold passages were chosen in: its folder name, its corpus digest, or the digest's first 12 or
more characters.
"""

import hashlib
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from rag_eval_pipeline.lib.errors import InputError

ANSWERABLE = "answerable"
NO_ANSWER_STRATA = (
    "out_of_scope",
    "near_miss",
    "false_premise",
    "prompt_injection",
    "withdrawn_document",
)
STRATA = (ANSWERABLE, *NO_ANSWER_STRATA)
REQUIRED_FIELDS = {
    "id": str,
    "question": str,
    "language": str,
    "stratum": str,
    "gold": list,
    "reference_answers": list,
    "must_mention": list,
    "labelled_against": str,
}

ITEM_SCHEMA = {
    "item_id": pl.String,
    "line": pl.Int64,
    "question": pl.String,
    "language": pl.String,
    "stratum": pl.String,
    "answerable": pl.Boolean,
    "reference_answers": pl.List(pl.String),
    "must_mention": pl.List(pl.String),
    "labelled_against": pl.String,
}
GOLD_SCHEMA = {"item_id": pl.String, "passage_id": pl.String, "grade": pl.Int64}
# A ``labelled_against`` of this many lowercase hex digits or more (up to a whole SHA-256) may be
# the start of a corpus digest: the CLI and the reports print a digest's first 12.
DIGEST_PREFIX_MIN = 12
_DIGEST_PREFIX = re.compile(rf"[0-9a-f]{{{DIGEST_PREFIX_MIN},64}}")


class GoldenSetError(InputError):
    """A golden set that cannot be used: the message names the file, the line and the problem."""


def jsonl_lines(text: str) -> Iterator[tuple[int, str]]:
    """The non-blank lines of JSON Lines text, with their 1-based numbers.

    A line ends at a line feed, a carriage return and line feed, or a carriage return alone
    (neither can occur raw inside a JSON string), never at U+0085, U+2028 or U+2029, which a
    JSON string may hold as they are (``json.dumps(..., ensure_ascii=False)`` writes them so)
    and where ``str.splitlines`` would cut the line. Every JSONL reader of the project reads its
    lines here, so they number a file's lines alike."""
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    for number, line in enumerate(text.split("\n"), start=1):
        if line.strip():
            yield number, line


def utf8_text(path: Path, error: type[Exception]) -> str:
    """A text file's contents; one that is not UTF-8 raises ``error`` naming the file, the line
    and the byte offset where it stops being UTF-8."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[: exc.start].count(b"\n") + 1
        raise error(
            f"{path}:{line}: not UTF-8 text ({exc.reason} at byte offset {exc.start})"
        ) from None


def json_problem(exc: json.JSONDecodeError) -> str:
    """What the JSON parser found wrong, complete, for a message that already names the file and
    the line: ``malformed JSON at column <n>: <the parser's message>``, the column being the one
    the parser names (``exc.colno``, 1-based, of ``exc.lineno``). Some of the parser's messages
    leave the place to the position it gives apart (``Unterminated string starting at``,
    ``Invalid control character at``): the column is said there, ``malformed JSON:
    Unterminated string starting at column 30``, instead of leaving the sentence cut off."""
    if exc.msg.endswith(" at"):
        return f"malformed JSON: {exc.msg} column {exc.colno}"
    return f"malformed JSON at column {exc.colno}: {exc.msg}"


def json_line_problem(exc: json.JSONDecodeError) -> str:
    """``json_problem`` for one line of a JSON Lines file, saying so when the line ends before
    its object or array does (an item wrapped over several lines, as pretty-printed JSON is)."""
    problem = json_problem(exc)
    if exc.doc.startswith(("{", "[")) and exc.pos >= len(exc.doc.rstrip()):
        problem += "; the line ends before its JSON value does: each item must be whole on one line"
    return problem


@dataclass(frozen=True)
class GoldenSet:
    """Parsed golden items and their gold passages, with the digest that pins them."""

    name: str
    golden_digest: str
    items: pl.DataFrame
    gold: pl.DataFrame


def _check_item(record: object, source: str, line: int) -> dict:
    where = f"{source}:{line}"
    if not isinstance(record, dict):
        raise GoldenSetError(f"{where}: expected a JSON object, got {type(record).__name__}")
    for name, kind in REQUIRED_FIELDS.items():
        if name not in record:
            unknown = [field for field in record if field not in REQUIRED_FIELDS]
            named = ", ".join(repr(field) for field in unknown)
            also = f" (it has field(s) the format does not name: {named})" if unknown else ""
            raise GoldenSetError(f"{where}: item is missing the field '{name}'{also}")
        if not isinstance(record[name], kind):
            raise GoldenSetError(
                f"{where}: field '{name}' must be a {kind.__name__}, "
                f"got {type(record[name]).__name__}"
            )
    item_id = record["id"]
    if not item_id.strip() or not record["question"].strip():
        raise GoldenSetError(f"{where}: item '{item_id}' has an empty id or question")
    language = record["language"]
    if not language.strip() or language != language.strip():
        # Its figures would be reported under a language scope without a name, or beside the
        # same language's without the spaces.
        problem = "an empty language" if not language.strip() else f"language {language!r}"
        raise GoldenSetError(f"{where}: item '{item_id}' has {problem}; write its code (en, de)")
    if record["stratum"] not in STRATA:
        raise GoldenSetError(
            f"{where}: item '{item_id}' has stratum {record['stratum']!r}; "
            f"expected one of {', '.join(STRATA)}"
        )
    for position, gold in enumerate(record["gold"], start=1):
        if not isinstance(gold, dict) or set(gold) != {"passage_id", "grade"}:
            raise GoldenSetError(
                f"{where}: item '{item_id}' gold entry {position} must be "
                "{'passage_id': ..., 'grade': ...}"
            )
        grade = gold["grade"]
        if isinstance(grade, bool) or not isinstance(grade, int) or not 0 <= grade <= 3:
            raise GoldenSetError(
                f"{where}: item '{item_id}' gold {gold['passage_id']!r} has grade {grade!r}; "
                "grades are the integers 0 to 3"
            )
    passage_ids = [gold["passage_id"] for gold in record["gold"]]
    if len(set(passage_ids)) != len(passage_ids):
        raise GoldenSetError(f"{where}: item '{item_id}' lists a gold passage twice")
    for name in ("reference_answers", "must_mention"):
        if not all(isinstance(value, str) for value in record[name]):
            raise GoldenSetError(f"{where}: item '{item_id}' field '{name}' must hold strings")
    if record["stratum"] == ANSWERABLE and not any(g["grade"] >= 2 for g in record["gold"]):
        raise GoldenSetError(
            f"{where}: answerable item '{item_id}' has no gold passage of grade 2 or 3"
        )
    answering = [g for g in record["gold"] if g["grade"] >= 2]
    if record["stratum"] != ANSWERABLE and answering:
        raise GoldenSetError(
            f"{where}: no-answer item '{item_id}' (stratum {record['stratum']}) has gold passage "
            f"'{answering[0]['passage_id']}' at grade {answering[0]['grade']}: a passage that "
            "answers it makes it answerable; grade it 0 (judged not to answer) or 1, or make "
            "the item answerable"
        )
    if record["stratum"] != ANSWERABLE:
        for name in ("reference_answers", "must_mention"):
            if record[name]:
                raise GoldenSetError(
                    f"{where}: no-answer item '{item_id}' (stratum {record['stratum']}) has "
                    f"'{name}' {record[name]!r}: a no-answer item is scored only on whether "
                    f"it is refused, so these would never be checked; empty '{name}', or make "
                    "the item answerable (stratum answerable, its answering passage in 'gold' "
                    "at grade 2 or 3)"
                )
    return record


def parse_golden_lines(text: str, source: str) -> list[tuple[int, dict]]:
    """Parse and check the JSONL text of a golden set (lines as ``jsonl_lines`` reads them);
    returns ``(line number, item)`` pairs."""
    records: list[tuple[int, dict]] = []
    seen: dict[str, int] = {}
    for number, line in jsonl_lines(text):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise GoldenSetError(f"{source}:{number}: {json_line_problem(exc)}") from None
        record = _check_item(record, source, number)
        if record["id"] in seen:
            raise GoldenSetError(
                f"{source}:{number}: item id '{record['id']}' already used on line "
                f"{seen[record['id']]}"
            )
        seen[record["id"]] = number
        records.append((number, record))
    if not records:
        raise GoldenSetError(f"{source}: golden set has no items")
    return records


def golden_digest(records: list[dict]) -> str:
    """SHA-256 over the items as canonical JSON, sorted by id (file order does not matter)."""
    lines = sorted(
        json.dumps(record, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        for record in records
    )
    return hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()


def load_golden_set(path: Path | str) -> GoldenSet:
    """Read and check a golden-set file; errors name the file, the line and the problem."""
    path = Path(path)
    if not path.is_file():
        raise GoldenSetError(f"{path}: golden set file does not exist")
    numbered = parse_golden_lines(utf8_text(path, GoldenSetError), str(path))
    records = [record for _, record in numbered]
    items = pl.DataFrame(
        [
            {
                "item_id": record["id"],
                "line": number,
                "question": record["question"],
                "language": record["language"],
                "stratum": record["stratum"],
                "answerable": record["stratum"] == ANSWERABLE,
                "reference_answers": record["reference_answers"],
                "must_mention": record["must_mention"],
                "labelled_against": record["labelled_against"],
            }
            for number, record in numbered
        ],
        schema=ITEM_SCHEMA,
    )
    gold = pl.DataFrame(
        [
            {"item_id": record["id"], "passage_id": g["passage_id"], "grade": g["grade"]}
            for record in records
            for g in record["gold"]
        ],
        schema=GOLD_SCHEMA,
    )
    return GoldenSet(golden_set_name(path), golden_digest(records), items, gold)


GENERIC_GOLDEN_STEM = "golden"
GOLDEN_SETS_FOLDER = "golden_sets"  # golden_sets/<name>.jsonl: the name is the file's


def golden_set_name(path: Path) -> str:
    """The name a golden set is shown by (``eval_runs.golden_set``; its digest, not its name, is
    part of a run's identity): the file's stem (``golden_sets/procedures.jsonl``: procedures),
    or for a file named ``golden.jsonl`` (the layout an import writes, ``suites/<suite>/``) its
    folder's name, so every suite's golden set is not shown as "golden"."""
    if path.stem == GENERIC_GOLDEN_STEM and path.parent.name not in ("", GOLDEN_SETS_FOLDER):
        return path.parent.name
    return path.stem


def names_snapshot(label: str, *, snapshot_id: str, corpus_digest: str) -> bool:
    """Whether a ``labelled_against`` value names the snapshot ``snapshot_id``: its folder name,
    its corpus digest, or the first ``DIGEST_PREFIX_MIN`` (12) or more characters of that digest
    (``check_labelled_against`` makes sure such a prefix names no other snapshot)."""
    return label in (snapshot_id, corpus_digest) or bool(
        _DIGEST_PREFIX.fullmatch(label) and corpus_digest.startswith(label)
    )


def validate_against_snapshot(
    golden: GoldenSet,
    passages: pl.DataFrame,
    *,
    snapshot_id: str,
    corpus_digest: str,
    source: str,
    labelled: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Check gold ids against a snapshot and flag drifted items.

    On the snapshot an item was labelled against (by folder name, digest or digest prefix:
    ``names_snapshot``), its gold is checked (``check_gold_in``). On any other snapshot the
    golden set is read as it stands: an item whose grade >= 2 gold passage is not current
    (superseded, withdrawn or gone) is flagged for re-labelling with the reason, and so is one
    whose grade >= 2 gold passage is current but changed since labelling (its passage digest,
    over its text and its document's details, differs from the one in ``labelled``: rows of
    ``labelled_against, passage_id, labelled_digest`` of the snapshots the items are labelled
    against; the reference answers were written for the old text).
    Returns one row per item: ``item_id, drifted, drift_reason``.
    """
    here = [
        label
        for label in golden.items["labelled_against"].unique().to_list()
        if names_snapshot(label, snapshot_id=snapshot_id, corpus_digest=corpus_digest)
    ]
    check_gold_in(golden, passages, here, snapshot_id=snapshot_id, source=source)
    joined = _gold_with_status(golden, passages)
    if labelled is None or "passage_digest" not in passages.columns:
        joined = joined.with_columns(changed=pl.lit(False))
    else:
        joined = joined.join(
            passages.select("passage_id", "passage_digest"), on="passage_id", how="left"
        ).join(labelled, on=["labelled_against", "passage_id"], how="left")
        joined = joined.with_columns(
            changed=(pl.col("labelled_digest") != pl.col("passage_digest")).fill_null(False)
        )
    reasons = (
        joined.filter(pl.col("grade") >= 2)
        .with_columns(
            reason=pl.when(pl.col("status").is_null())
            .then(pl.format("{} is not in the snapshot", "passage_id"))
            .when(pl.col("status") != "current")
            .then(pl.format("{} is {}", "passage_id", "status"))
            .when(pl.col("changed"))
            .then(pl.format("{} changed since {}", "passage_id", "labelled_against"))
        )
        .filter(pl.col("reason").is_not_null())
        .group_by("item_id")
        .agg(pl.col("reason").sort().str.join("; ").alias("drift_reason"))
    )
    return (
        golden.items.select("item_id")
        .join(reasons, on="item_id", how="left")
        .with_columns(drifted=pl.col("drift_reason").is_not_null())
        .select("item_id", "drifted", "drift_reason")
    )


def _gold_with_status(golden: GoldenSet, passages: pl.DataFrame) -> pl.DataFrame:
    """Every gold row with its item's line and label and the passage's status in ``passages``
    (null: not there)."""
    return golden.gold.join(
        passages.select("passage_id", "status"), on="passage_id", how="left"
    ).join(golden.items.select("item_id", "line", "labelled_against"), on="item_id")


def check_gold_in(
    golden: GoldenSet,
    passages: pl.DataFrame,
    labels: Sequence[str],
    *,
    snapshot_id: str,
    source: str,
) -> None:
    """The gold of the items labelled against ``labels`` (labels naming snapshot
    ``snapshot_id``, whose passages with their status are ``passages``), as they were labelled:
    every gold id must be a passage of that snapshot, and a grade-3 gold passage (the current
    answering section, by definition) must be current there; the first bad one in file order
    fails naming its line, with the count. A superseded passage is grade 1, and a question only
    a withdrawn document answered is a ``withdrawn_document`` item."""
    joined = _gold_with_status(golden, passages).filter(pl.col("labelled_against").is_in(labels))
    unknown = joined.filter(pl.col("status").is_null()).sort("line", "passage_id")
    if unknown.height:
        first = unknown.row(0, named=True)
        raise GoldenSetError(
            f"{source}:{first['line']}: item '{first['item_id']}' names gold passage "
            f"'{first['passage_id']}', which is not in snapshot {snapshot_id} (labelled against "
            f"{first['labelled_against']}; {unknown.height} unknown gold id(s) in all)"
        )
    stale = joined.filter((pl.col("grade") == 3) & (pl.col("status") != "current"))
    if stale.height:
        first = stale.sort("line", "passage_id").row(0, named=True)
        hint = (
            "grade it 1 (a superseded version), and give the current version grade 3"
            if first["status"] == "superseded"
            else "a question only a withdrawn document answered is a withdrawn_document item"
        )
        raise GoldenSetError(
            f"{source}:{first['line']}: item '{first['item_id']}' gives grade 3 (the current "
            f"answering section) to '{first['passage_id']}', which is {first['status']} in "
            f"snapshot {snapshot_id}, the snapshot it is labelled against: {hint} "
            f"({stale.height} such gold passage(s) in all)"
        )


def check_labelled_against(
    golden: GoldenSet,
    corpus_root: Path,
    *,
    snapshot_id: str,
    corpus_digest: str,
    source: str,
) -> dict[str, str]:
    """Every item's ``labelled_against`` names exactly one snapshot of ``corpus_root``: a
    snapshot folder's name, the corpus digest one was frozen with, or the first 12 or more
    characters of such a digest (as the CLI prints them; ``snapshot_id``, frozen with
    ``corpus_digest``, counts as frozen). An item labelled against no snapshot (a typo, a date
    with no folder) would have its gold ids checked against none, so a wrong id would pass as a
    retrieval miss: it fails naming the first such line, with the snapshot folders there. A
    digest prefix that more than one snapshot's digest starts with (or that is also the name of
    a folder frozen with another digest) fails the same way, naming the candidates.

    Returns the folder name each label names, for the labels that name another snapshot than
    ``snapshot_id`` (whose gold ids ``check_gold_in`` then checks against that snapshot)."""
    values = set(golden.items["labelled_against"].to_list()) - {snapshot_id, corpus_digest}
    if not values:
        return {}
    from rag_eval_pipeline.lib.inputs.corpus import MANIFEST_NAME, find_snapshot, frozen_digests

    root = Path(corpus_root)
    folders = sorted(
        entry.name
        for entry in (root.iterdir() if root.is_dir() else ())
        if (entry / "documents").is_dir() or (entry / MANIFEST_NAME).is_file()
    )
    # A digest or digest prefix: the manifests are read once (and again only for a match).
    digests = (
        frozen_digests(root) | {corpus_digest}
        if any(_DIGEST_PREFIX.fullmatch(value) for value in values)
        else set()
    )

    def frozen_in(digest: str) -> str:  # a folder frozen with ``digest`` (one of the digests)
        found = None if digest == corpus_digest else find_snapshot(root, digest)
        return found.name if found is not None else snapshot_id

    problems: dict[str, list[tuple[str, str | None]]] = {}  # label -> the snapshots it names
    resolved: dict[str, str] = {}  # label -> the folder it names
    for value in values:
        named = [
            (frozen_in(digest), digest)
            for digest in sorted(digests)
            if _DIGEST_PREFIX.fullmatch(value) and digest.startswith(value)
        ]
        if value in folders:
            if all(folder == value for folder, _ in named):
                resolved[value] = value
                continue
            named.insert(0, (value, None))
        if len(named) != 1:
            problems[value] = named
        else:
            resolved[value] = named[0][0]
    if not problems:
        return {label: folder for label, folder in resolved.items() if folder != snapshot_id}
    first = (
        golden.items.filter(pl.col("labelled_against").is_in(sorted(problems)))
        .sort("line")
        .row(0, named=True)
    )
    where = (
        f"{source}:{first['line']}: item '{first['item_id']}' is labelled against "
        f"{first['labelled_against']!r}"
    )
    candidates = problems[first["labelled_against"]]
    if candidates:
        listed = "; ".join(
            f"folder {folder}" + (f" (corpus digest {digest})" if digest else "")
            for folder, digest in candidates
        )
        raise GoldenSetError(
            f"{where}, which names {len(candidates)} snapshots of {root}: {listed}: give as many "
            "characters of the corpus digest as name one of them (or its folder name)"
        )
    raise GoldenSetError(
        f"{where}, which names no snapshot of {root} (snapshot folders: "
        f"{', '.join(folders) or 'none'}; a frozen corpus digest, or its first "
        f"{DIGEST_PREFIX_MIN} or more characters, also names one): set 'labelled_against' to "
        "the snapshot its gold passages were chosen in, so their ids are checked"
    )


def golden_tables(golden: GoldenSet) -> dict[str, pl.DataFrame]:
    """The rows kept for one golden set, keyed by table, each carrying the golden digest."""
    digest = pl.lit(golden.golden_digest).alias("golden_digest")
    return {
        "golden_items": golden.items.with_columns(digest, pl.lit(golden.name).alias("golden_set")),
        "golden_gold": golden.gold.with_columns(digest),
    }


def strata_counts(items: pl.DataFrame) -> dict[str, int]:
    """Items per stratum."""
    return {
        row["stratum"]: row["len"] for row in items.group_by("stratum").len().iter_rows(named=True)
    }
