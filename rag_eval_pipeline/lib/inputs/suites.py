"""Suites: a named golden set with the corpus it is asked against.

A suite is one YAML file ``<registry>/<name>.yaml`` (the registry folder is ``suites/`` by default,
``RAG_EVAL_SUITES`` to move it)::

    description: The bundled procedure library.
    golden_set: golden_sets/procedures.jsonl      # the labelled questions
    corpus_root: corpus_snapshots                 # folders of dated snapshots
    snapshot: auto                                # or one snapshot folder's name (2026-11-01)
    human_labels: golden_sets/procedures.human_labels.jsonl   # optional, for judge calibration
    trace_store: ""                               # optional production traces for the judge
    nightly: true                                 # evaluated by the 02:00 schedule

Relative paths are taken from the project folder (``lib.paths``). A field naming a folder or a
file may be a bare date (``snapshot: 2026-11-01``), which YAML reads as a date: it is taken as its
ISO text, the folder's name. The suite is one dimension of the nightly partitions, beside the
night: two suites evaluated on one night never share a Dagster materialization, a baseline or a
history. ``rag-eval import`` writes a collection into a suite of its own (``suites/<name>/`` and
``suites/<name>.yaml``), never into another suite's folders.

``list_suites`` refuses a registry holding a bad suite file, naming it; ``scan_suites`` (the
schedule's and ``rag-eval suites``') returns the good suites and an error for each bad file.
"""

import datetime as dt
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from rag_eval_pipeline.lib.errors import ConfigError
from rag_eval_pipeline.lib.paths import project_path, project_root

# Suite names are Dagster partition keys: no '|' (the multi-partition separator), ',' or spaces.
SUITE_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
DEFAULT_SUITE = "procedures"
FIELDS = {
    "description": str,
    "golden_set": str,
    "corpus_root": str,
    "snapshot": str,
    "human_labels": str,
    "trace_store": str,
    "nightly": bool,
}
REQUIRED = ("golden_set", "corpus_root")
# Fields naming a folder or a file: snapshot folders are named by their date, so a bare
# ``2026-11-01`` (a YAML date) is its ISO text, the name written.
NAMES_A_PATH = ("golden_set", "corpus_root", "snapshot", "human_labels", "trace_store")


class SuiteError(ConfigError):
    """A suite that cannot be used; the message names the suite file and the field."""


@dataclass(frozen=True)
class Suite:
    """One suite, its paths resolved."""

    name: str
    golden_set: Path
    corpus_root: Path
    snapshot: str = "auto"
    human_labels: Path | None = None
    trace_store: Path | None = None
    nightly: bool = False
    description: str = ""
    source: Path | None = None

    def as_yaml(self) -> str:
        """The suite file's text (paths inside the project folder relative to it)."""
        document = {
            "description": self.description,
            "golden_set": portable(self.golden_set),
            "corpus_root": portable(self.corpus_root),
            "snapshot": self.snapshot,
            "human_labels": portable(self.human_labels) if self.human_labels else "",
            "trace_store": portable(self.trace_store) if self.trace_store else "",
            "nightly": self.nightly,
        }
        return yaml.safe_dump(document, sort_keys=False, allow_unicode=True)


def portable(path: Path) -> str:
    """A path as a suite file records it: relative to the project folder when inside it."""
    resolved = Path(path).resolve()
    root = project_root().resolve()
    return str(resolved.relative_to(root)) if resolved.is_relative_to(root) else str(resolved)


def check_suite_name(name: str, where: str = "suite name") -> str:
    if not isinstance(name, str) or not SUITE_NAME.match(name):
        raise SuiteError(
            f"{where} {name!r}: use lowercase letters, digits, '-' and '_' (at most 64, "
            "starting with a letter or digit)"
        )
    return name


def suite_file(registry: Path | str, name: str) -> Path:
    return project_path(registry) / f"{check_suite_name(name)}.yaml"


def folder_name(value: object, field: str, source: Path) -> object:
    """A path field's value, a YAML date (``2026-11-01``) as its ISO text; a date with a time is
    refused, as its text would not be the one written."""
    if isinstance(value, dt.datetime):
        raise SuiteError(
            f"{source}: '{field}' must be a folder or file name, got the timestamp "
            f"{value.isoformat(sep=' ')} (quote it)"
        )
    return value.isoformat() if isinstance(value, dt.date) else value


def parse_suite(name: str, text: str, source: Path) -> Suite:
    """A suite from its file's text; every problem names the file and the field."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SuiteError(f"{source}: not valid YAML: {' '.join(str(exc).split())}") from None
    except ValueError as exc:  # a date YAML matches that the calendar does not have (2026-11-31)
        raise SuiteError(f"{source}: a value is not valid: {exc}") from None
    if not isinstance(document, dict):
        raise SuiteError(f"{source}: a suite file is a mapping of the fields {', '.join(FIELDS)}")
    unknown = sorted(set(document) - set(FIELDS))
    if unknown:
        raise SuiteError(f"{source}: unknown field(s) {', '.join(unknown)}")
    for field in NAMES_A_PATH:
        document[field] = folder_name(document.get(field), field, source)
    for field, kind in FIELDS.items():
        value = document.get(field)
        if value is not None and not isinstance(value, kind):
            raise SuiteError(
                f"{source}: '{field}' must be a {kind.__name__}, got {type(value).__name__} "
                f"{value!r}" + (" (quote it)" if kind is str else "")
            )
    for field in REQUIRED:
        if not document.get(field):
            raise SuiteError(f"{source}: '{field}' is required")

    def optional(field: str) -> Path | None:
        return project_path(document[field]) if document.get(field) else None

    return Suite(
        name=name,
        golden_set=project_path(document["golden_set"]),
        corpus_root=project_path(document["corpus_root"]),
        snapshot=document.get("snapshot") or "auto",
        human_labels=optional("human_labels"),
        trace_store=optional("trace_store"),
        nightly=bool(document.get("nightly", False)),
        description=document.get("description") or "",
        source=source,
    )


def check_suite_files(suite: Suite) -> None:
    """The optional files a suite names (``human_labels``, ``trace_store``) are there: a night
    would otherwise run without them (an uncalibrated judge, no production traces) as if the
    field were empty. A missing one is a ``SuiteError`` naming the suite file, the field and the
    path."""
    for field in ("human_labels", "trace_store"):
        path = getattr(suite, field)
        if path is not None and not path.is_file():
            problem = "is not a file" if path.exists() else "does not exist"
            raise SuiteError(f"{suite.source or suite.name}: {field} {path} {problem}")


def load_suite(registry: Path | str, name: str) -> Suite:
    """The suite ``name`` of the registry folder; an unknown name lists the known ones (by file
    name: another suite's bad file does not hide the unknown name)."""
    path = suite_file(registry, name)
    if not path.is_file():
        check_registry(registry)
        known = ", ".join(p.stem for p in suite_files(registry) if SUITE_NAME.match(p.stem))
        raise SuiteError(f"{path}: no suite named {name!r} (suites: {known or 'none'})")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise SuiteError(f"{path}: cannot be read: {error}") from None
    return parse_suite(name, text, path)


def check_registry(registry: Path | str) -> None:
    """Refuse a registry folder (``RAG_EVAL_SUITES``) that does not exist or is not a folder, rather
    than read it as a folder without suites."""
    folder = project_path(registry)
    if not folder.is_dir():
        state = "is not a folder" if folder.exists() else "does not exist"
        raise SuiteError(f"{folder}: the suite folder (RAG_EVAL_SUITES) {state}")


def suite_files(registry: Path | str) -> list[Path]:
    """The ``*.yaml`` files of the registry folder, by name (hidden files left out)."""
    folder = project_path(registry)
    if not folder.is_dir():
        return []
    return [path for path in sorted(folder.glob("*.yaml")) if not path.name.startswith(".")]


def scan_suites(registry: Path | str) -> tuple[list[Suite], list[SuiteError]]:
    """Every suite file of the registry folder, by name: the suites read, and one error for each
    file that is not a suite (a bad field, bad YAML, a file name that is not a suite name)."""
    suites, problems = [], []
    for path in suite_files(registry):
        try:
            check_suite_name(path.stem, f"{path}: the file name")
            suites.append(parse_suite(path.stem, path.read_text(encoding="utf-8"), path))
        except SuiteError as error:
            problems.append(error)
        except (OSError, UnicodeDecodeError) as error:
            problems.append(SuiteError(f"{path}: cannot be read: {error}"))
    return suites, problems


def list_suites(registry: Path | str) -> list[Suite]:
    """Every suite of the registry folder, by name; a bad suite file is an error naming it (every
    bad file, when there are several)."""
    suites, problems = scan_suites(registry)
    if problems:
        raise SuiteError("; ".join(str(problem) for problem in problems))
    return suites


def write_suite(registry: Path | str, suite: Suite) -> Path:
    """Write (or replace) a suite file, to a temporary name first."""
    path = suite_file(registry, suite.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".yaml.tmp")
    temporary.write_text(suite.as_yaml(), encoding="utf-8")
    temporary.replace(path)
    return path
