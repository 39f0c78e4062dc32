"""Corpus snapshots: parsing documents into versioned passages and pinning them with a digest.

A snapshot folder holds ``documents/<doc_id>@v<version>.md`` files (YAML front matter, then
``## `` sections) and a ``manifest.json`` written by ``rag-eval freeze``. Each section is one
retrievable passage with the stable id ``<doc_id>@v<version>#s<n>``, so a revised document yields
new ids and a golden item that points at the old version is visibly stale.

The content digest is SHA-256 over a canonical serialisation of every passage (id, text and the
document metadata), one JSON line per passage sorted by passage id. It is independent of file
order, modification times and platform line endings. Per-document digests are kept in the
manifest, so a mismatch names the documents that changed.
"""

import datetime as dt
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl
import yaml

from rag_eval_pipeline.lib.errors import RagEvalError

DIGEST_ALGORITHM = "sha256:passage-jsonl:v1"
MANIFEST_NAME = "manifest.json"
DOCUMENT_STATUSES = ("current", "superseded", "withdrawn")
REQUIRED_KEYS = ("doc_id", "title", "version", "effective_date", "status", "language")
DOC_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$")

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


class CorpusError(RagEvalError):
    """A snapshot that cannot be loaded: the message names the file or document and the problem."""


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
    """A loaded snapshot: its passages as a Polars frame and the digests that pin it."""

    snapshot_id: str
    corpus_digest: str
    passages: pl.DataFrame
    document_digests: dict[str, str]
    frozen_at: str | None = None
    documents: tuple[Document, ...] = field(default=(), repr=False)

    @property
    def document_count(self) -> int:
        return len(self.document_digests)


def passage_id(doc_id: str, version: int, section: int) -> str:
    """The stable passage id, e.g. ``SPEC-LABEL-004@v3#s2``."""
    return f"{doc_id}@v{version}#s{section}"


def normalise_text(text: str) -> str:
    """Line endings to ``\\n``, trailing spaces stripped, outer blank lines removed."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return "\n".join(line.rstrip() for line in lines).strip()


def _fail(source: str | Path, message: str, line: int | None = None) -> CorpusError:
    where = f"{source}:{line}" if line is not None else f"{source}"
    return CorpusError(f"{where}: {message}")


def parse_document(text: str, source: str | Path) -> Document:
    """Parse one document file; every error names the file (and the line where it helps)."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    lines = text.split("\n")
    if not lines or lines[0].strip() != "---":
        raise _fail(source, "document must start with a '---' front matter line", 1)
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() == "---")
    except StopIteration:
        raise _fail(source, "front matter is not closed by a '---' line", 1) from None
    try:
        meta = yaml.safe_load("\n".join(lines[1:end])) or {}
    except yaml.YAMLError as exc:
        raise _fail(source, f"front matter is not valid YAML: {exc}", 2) from None
    if not isinstance(meta, dict):
        raise _fail(source, "front matter must be a mapping of keys to values", 2)
    for key in REQUIRED_KEYS:
        if meta.get(key) in (None, ""):
            what = "document without a version" if key == "version" else f"missing '{key}'"
            raise _fail(source, f"{what} in front matter", 1)
    doc_id = str(meta["doc_id"])
    if not DOC_ID_PATTERN.match(doc_id):
        raise _fail(source, f"doc_id {doc_id!r} has characters outside [A-Za-z0-9_.:-]", 2)
    version = meta["version"]
    if isinstance(version, str) and version.lower().lstrip("v").isdigit():
        version = int(version.lower().lstrip("v"))
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise _fail(source, f"version must be a positive integer, got {meta['version']!r}", 2)
    status = str(meta["status"])
    if status not in DOCUMENT_STATUSES:
        raise _fail(source, f"status {status!r} is not one of {', '.join(DOCUMENT_STATUSES)}", 2)
    effective = meta["effective_date"]
    if isinstance(effective, str):
        try:
            effective = dt.date.fromisoformat(effective)
        except ValueError:
            raise _fail(source, f"effective_date {effective!r} is not YYYY-MM-DD", 2) from None
    if not isinstance(effective, dt.date):
        raise _fail(source, f"effective_date {effective!r} is not YYYY-MM-DD", 2)

    sections: list[tuple[str, str]] = []
    heading: str | None = None
    body: list[str] = []
    for number, line in enumerate(lines[end + 1 :], start=end + 2):
        if line.startswith("## "):
            if heading is not None:
                sections.append((heading, normalise_text("\n".join(body))))
            heading, body = line[3:].strip(), []
        elif heading is None:
            if line.strip():
                raise _fail(source, "text before the first '## ' section heading", number)
        else:
            body.append(line)
    if heading is not None:
        sections.append((heading, normalise_text("\n".join(body))))
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


def _canonical_passage(document: Document, section: int, title: str, text: str) -> str:
    record = {
        "passage_id": passage_id(document.doc_id, document.version, section),
        "doc_id": document.doc_id,
        "version": document.version,
        "status": document.status,
        "superseded_by": document.superseded_by,
        "effective_date": document.effective_date.isoformat(),
        "language": document.language,
        "title": normalise_text(document.title),
        "section_title": normalise_text(title),
        "text": normalise_text(text),
    }
    return json.dumps(record, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def passages_of(documents: list[Document]) -> pl.DataFrame:
    """One row per passage, sorted by passage id, with each passage's canonical digest."""
    rows = []
    for document in documents:
        for section, (title, text) in enumerate(document.sections, start=1):
            rows.append(
                {
                    "passage_id": passage_id(document.doc_id, document.version, section),
                    "doc_id": document.doc_id,
                    "version": document.version,
                    "section": section,
                    "title": document.title,
                    "section_title": title,
                    "text": text,
                    "status": document.status,
                    "superseded_by": document.superseded_by,
                    "effective_date": document.effective_date,
                    "language": document.language,
                    "passage_digest": _sha256(_canonical_passage(document, section, title, text)),
                }
            )
    return pl.DataFrame(rows, schema=PASSAGE_SCHEMA).sort("passage_id")


def corpus_digest(documents: list[Document]) -> tuple[str, dict[str, str]]:
    """The corpus digest and the per-document digests (keyed by ``doc_id@vN``).

    Convention: each passage is serialised as canonical JSON (sorted keys, normalised text);
    the corpus digest is SHA-256 over those lines sorted by passage id and joined by newlines.
    A document digest is the same over that document's passages alone.
    """
    by_document: dict[str, list[tuple[str, str]]] = {}
    for document in documents:
        lines = by_document.setdefault(document.version_id, [])
        for section, (title, text) in enumerate(document.sections, start=1):
            lines.append(
                (
                    passage_id(document.doc_id, document.version, section),
                    _canonical_passage(document, section, title, text),
                )
            )
    document_digests = {
        version_id: _sha256("\n".join(line for _, line in sorted(lines)))
        for version_id, lines in sorted(by_document.items())
    }
    every_line = sorted(pair for lines in by_document.values() for pair in lines)
    return _sha256("\n".join(line for _, line in every_line)), document_digests


def read_documents(snapshot_dir: Path) -> list[Document]:
    """Parse every document of a snapshot folder, checking ids, versions and duplicates."""
    folder = snapshot_dir / "documents"
    if not folder.is_dir():
        raise _fail(snapshot_dir, "snapshot has no 'documents/' folder")
    documents: list[Document] = []
    seen: dict[str, str] = {}
    for path in sorted(folder.glob("*.md")):
        document = parse_document(path.read_text(encoding="utf-8"), path)
        if path.stem != document.version_id:
            raise _fail(path, f"file name should be {document.version_id}.md for its front matter")
        if document.version_id in seen:
            raise _fail(
                path, f"{document.version_id} is also defined in {seen[document.version_id]}"
            )
        seen[document.version_id] = str(path)
        documents.append(document)
    if not documents:
        raise _fail(folder, "no '*.md' documents found")
    current: dict[str, list[str]] = {}
    for document in documents:
        if document.status == "current":
            current.setdefault(document.doc_id, []).append(document.version_id)
    for doc_id, versions in current.items():
        if len(versions) > 1:
            raise _fail(
                folder, f"{doc_id} has more than one current version: {', '.join(versions)}"
            )
    return documents


def read_manifest(snapshot_dir: Path) -> dict:
    path = snapshot_dir / MANIFEST_NAME
    if not path.is_file():
        raise _fail(snapshot_dir, f"no {MANIFEST_NAME}: freeze it first with 'rag-eval freeze'")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise _fail(path, f"not valid JSON: {exc.msg}", exc.lineno) from None
    for key in ("snapshot_id", "corpus_digest", "documents"):
        if key not in manifest:
            raise _fail(path, f"manifest has no '{key}'")
    return manifest


def _describe_mismatch(manifest: dict, document_digests: dict[str, str]) -> str:
    frozen = {key: value["digest"] for key, value in manifest["documents"].items()}
    changed = sorted(
        k for k in frozen.keys() & document_digests.keys() if frozen[k] != document_digests[k]
    )
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


def load_snapshot(snapshot_dir: Path | str, *, verify: bool = True) -> Snapshot:
    """Load a snapshot folder and verify it against its manifest digest.

    Raises ``CorpusError`` naming the manifest and the documents that changed when the files no
    longer match the digest they were frozen with.
    """
    snapshot_dir = Path(snapshot_dir)
    documents = read_documents(snapshot_dir)
    digest, document_digests = corpus_digest(documents)
    frozen_at = None
    snapshot_id = snapshot_dir.name
    if verify:
        manifest = read_manifest(snapshot_dir)
        if manifest["corpus_digest"] != digest:
            raise _fail(
                snapshot_dir / MANIFEST_NAME,
                f"snapshot files no longer match the manifest digest "
                f"{manifest['corpus_digest'][:12]} (now {digest[:12]}): "
                f"{_describe_mismatch(manifest, document_digests)}",
            )
        frozen_at = manifest.get("frozen_at")
        snapshot_id = manifest["snapshot_id"]
    return Snapshot(
        snapshot_id=snapshot_id,
        corpus_digest=digest,
        passages=passages_of(documents),
        document_digests=document_digests,
        frozen_at=frozen_at,
        documents=tuple(documents),
    )


def freeze_snapshot(snapshot_dir: Path | str, frozen_at: str | None = None) -> dict:
    """Write ``manifest.json`` with the corpus digest and per-document digests.

    The manifest is written to a temporary name and renamed, so a failed freeze leaves the
    previous manifest in place.
    """
    snapshot_dir = Path(snapshot_dir)
    documents = read_documents(snapshot_dir)
    digest, document_digests = corpus_digest(documents)
    by_version = {document.version_id: document for document in documents}
    manifest = {
        "snapshot_id": snapshot_dir.name,
        "digest_algorithm": DIGEST_ALGORITHM,
        "corpus_digest": digest,
        "frozen_at": frozen_at or dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat(),
        "document_count": len(documents),
        "passage_count": sum(len(document.sections) for document in documents),
        "documents": {
            version_id: {
                "file": f"documents/{version_id}.md",
                "status": by_version[version_id].status,
                "digest": document_digest,
            }
            for version_id, document_digest in document_digests.items()
        },
    }
    target = snapshot_dir / MANIFEST_NAME
    temporary = target.with_suffix(".json.tmp")
    temporary.write_text(
        json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    temporary.replace(target)
    return manifest


def choose_snapshot(
    corpus_root: Path | str, on_date: dt.date | None, requested: str = "auto"
) -> Path:
    """The snapshot folder to evaluate on.

    ``requested`` names a snapshot folder, or ``auto``: the newest snapshot whose id (an ISO date)
    is on or before ``on_date`` (the partition date), so a back-filled night uses the library as it
    stood that night.
    """
    corpus_root = Path(corpus_root)
    if requested != "auto":
        folder = corpus_root / requested
        if not folder.is_dir():
            raise CorpusError(f"{folder}: snapshot folder does not exist")
        return folder
    dated = []
    for folder in corpus_root.iterdir():
        if not folder.is_dir():
            continue
        try:
            dated.append((dt.date.fromisoformat(folder.name), folder))
        except ValueError:
            continue
    eligible = [item for item in sorted(dated) if on_date is None or item[0] <= on_date]
    if not eligible:
        raise CorpusError(f"{corpus_root}: no snapshot dated on or before {on_date}")
    return eligible[-1][1]


def snapshot_tables(snapshot: Snapshot, loaded_at: dt.datetime) -> dict[str, pl.DataFrame]:
    """The rows kept for one snapshot, keyed by table: ``corpus_snapshots`` (one row),
    ``corpus_documents`` and ``corpus_passages``, each carrying the corpus digest."""
    digest = snapshot.corpus_digest
    passages = snapshot.passages.with_columns(pl.lit(digest).alias("corpus_digest"))
    documents = pl.DataFrame(
        [
            {
                "corpus_digest": digest,
                "doc_version_id": d.version_id,
                "doc_id": d.doc_id,
                "version": d.version,
                "title": d.title,
                "status": d.status,
                "superseded_by": d.superseded_by,
                "effective_date": d.effective_date,
                "language": d.language,
                "owner": d.owner,
                "document_digest": snapshot.document_digests[d.version_id],
            }
            for d in snapshot.documents
        ]
    )
    summary = pl.DataFrame(
        [
            {
                "corpus_digest": digest,
                "snapshot_id": snapshot.snapshot_id,
                "document_count": snapshot.document_count,
                "passage_count": passages.height,
                "current_passage_count": passages.filter(pl.col("status") == "current").height,
                "frozen_at": snapshot.frozen_at,
                "loaded_at": loaded_at,
            }
        ]
    )
    return {"corpus_snapshots": summary, "corpus_documents": documents, "corpus_passages": passages}


def find_snapshot(corpus_root: Path | str, corpus_digest: str) -> Path | None:
    """The snapshot folder under ``corpus_root`` frozen with ``corpus_digest``, if any (read from
    the manifests; nothing is parsed)."""
    root = Path(corpus_root)
    if not root.is_dir():
        return None
    for manifest in sorted(root.glob(f"*/{MANIFEST_NAME}")):
        try:
            frozen = json.loads(manifest.read_text(encoding="utf-8")).get("corpus_digest")
        except (OSError, ValueError, AttributeError):
            continue
        if frozen == corpus_digest:
            return manifest.parent
    return None
