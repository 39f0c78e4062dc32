"""The evaluation-run record: everything that makes two runs the same run, written once.

An evaluation run is one suite on one night with one configuration. Its identity is the typed
record below; ``eval_run_id`` is derived from every field of it that can change a number:

- the suite and the night (the partition);
- the corpus digest and the golden-set digest (what was asked, against what);
- the system id and the digest of its configuration;
- the judge id and the digest of its configuration (the prompt digest included for an LLM judge);
- the digest of every run setting that can change a figure (``RunSettings``): retrieval depth,
  context size, cut-offs, relevance level, seeds, sample sizes, and the digests of the human
  labels and production traces the run reads;
- the variant (a re-baseline run is a different run from the night it was made for, even when
  every other field agrees);
- the version of the measure definitions the figures are computed with
  (``lib.metrics.MEASURES_VERSION``; empty in a record begun before it was recorded, and then
  left out of the identity, so such a record keeps its id).

The same record gives the same id: a re-run replaces that run's rows and nothing else. Any change
gives a new id, so two runs that differ only in ``context_k`` keep both their rows. The request
that started the run (re-baseline flag, reason, who asked) travels with the record but is not part
of the identity.
"""

import datetime as dt
import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

from rag_eval_pipeline.lib.errors import ConfigError
from rag_eval_pipeline.lib.metrics import MEASURES_VERSION

REBASELINE_TAG = "rag_eval/rebaseline"
REBASELINE_REASON_TAG = "rag_eval/rebaseline_reason"
REQUESTED_BY_TAG = "rag_eval/requested_by"
REBASELINE_FOR_TAG = "rag_eval/rebaseline_for"
EVAL_RUN_TAG = "rag_eval/eval_run_id"

STARTED = "started"
COMPLETE = "complete"
FAILED = "failed"
STATUSES = (STARTED, COMPLETE, FAILED)
# What a record written before measure definitions were versioned shows for them.
UNRECORDED = "unrecorded"


def config_digest(config: Mapping) -> str:
    """SHA-256 of a configuration as canonical JSON: two runs with equal digests ran alike."""
    canonical = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class RunSettings:
    """The run settings that can change a figure, checked before anything runs.

    ``human_labels_digest`` and ``trace_store_digest`` are the SHA-256 of the files the run reads
    (empty when it reads none), so new labels or new production traces make a new run.
    ``judge_repeats`` is how many times the judge judges each sampled claim (stability,
    ``lib.judges.stability``).
    """

    retrieval_depth: int = 20
    context_k: int = 5
    cutoffs: tuple[int, ...] = (1, 3, 5, 10)
    rel_level: int = 2
    judge_sample_size: int = 600
    judge_repeats: int = 1
    seed: int = 20261001
    bootstrap_resamples: int = 1000
    human_labels_digest: str = ""
    trace_store_digest: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "cutoffs", tuple(sorted(set(self.cutoffs))))
        self.check()

    def check(self) -> None:
        """Raise ``ConfigError`` naming the setting when a value would silently change figures."""

        def whole(name: str, value: object, low: int, high: int | None = None) -> None:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"setting '{name}' must be an integer, got {value!r}")
            if value < low or (high is not None and value > high):
                bounds = f"from {low}" + (f" to {high}" if high is not None else "")
                raise ConfigError(f"setting '{name}' must be {bounds}, got {value}")

        whole("retrieval_depth", self.retrieval_depth, 1, 10_000)
        whole("context_k", self.context_k, 1, self.retrieval_depth)
        if not self.cutoffs:
            raise ConfigError("setting 'cutoffs' must list at least one cut-off, e.g. [1, 5, 10]")
        for cutoff in self.cutoffs:
            whole("cutoffs", cutoff, 1, self.retrieval_depth)
        whole("rel_level", self.rel_level, 1, 3)
        whole("judge_sample_size", self.judge_sample_size, 0)
        whole("judge_repeats", self.judge_repeats, 1, 20)
        whole("seed", self.seed, 0)
        whole("bootstrap_resamples", self.bootstrap_resamples, 100)

    def as_dict(self) -> dict:
        values = asdict(self)
        values["cutoffs"] = list(self.cutoffs)
        return values

    @property
    def digest(self) -> str:
        return config_digest(self.as_dict())


@dataclass(frozen=True)
class RunRequest:
    """Why the run was started, from its Dagster tags: not part of the identity."""

    rebaseline: bool = False
    rebaseline_reason: str | None = None
    requested_by: str | None = None
    rebaseline_for: str | None = None

    @classmethod
    def from_tags(cls, tags: Mapping[str, str]) -> "RunRequest":
        return cls(
            rebaseline=tags.get(REBASELINE_TAG) == "true",
            rebaseline_reason=tags.get(REBASELINE_REASON_TAG),
            requested_by=tags.get(REQUESTED_BY_TAG),
            rebaseline_for=tags.get(REBASELINE_FOR_TAG),
        )

    @property
    def variant(self) -> str:
        return f"rebaseline-for:{self.rebaseline_for}" if self.rebaseline_for else ""


@dataclass(frozen=True)
class EvalRunRecord:
    """The identity of one evaluation run (module docstring)."""

    suite: str
    night: str
    snapshot_id: str
    corpus_digest: str
    golden_set: str
    golden_digest: str
    system_config: Mapping
    judge_config: Mapping
    settings: RunSettings
    request: RunRequest = field(default_factory=RunRequest)
    measures_version: str = MEASURES_VERSION

    @property
    def system_id(self) -> str:
        return str(self.system_config["system_id"])

    @property
    def judge_id(self) -> str:
        return str(self.judge_config["judge_id"])

    @property
    def system_config_digest(self) -> str:
        return config_digest(self.system_config)

    @property
    def judge_config_digest(self) -> str:
        return config_digest(self.judge_config)

    @property
    def variant(self) -> str:
        return self.request.variant

    @property
    def identity(self) -> list[str]:
        """The fields ``eval_run_id`` is derived from, in a fixed order."""
        return [
            self.suite,
            self.night,
            self.corpus_digest,
            self.golden_digest,
            self.system_id,
            self.system_config_digest,
            self.judge_id,
            self.judge_config_digest,
            self.settings.digest,
            self.variant,
        ] + ([self.measures_version] if self.measures_version else [])

    @property
    def eval_run_id(self) -> str:
        """``<night>-<12 hex>``: SHA-256 over ``identity``."""
        material = json.dumps(self.identity, separators=(",", ":"))
        return f"{self.night}-{hashlib.sha256(material.encode()).hexdigest()[:12]}"

    def as_row(self) -> dict:
        """The identity columns of ``eval_run_records``."""
        return {
            "eval_run_id": self.eval_run_id,
            "suite": self.suite,
            "partition_date": self.night,
            "variant": self.variant,
            "snapshot_id": self.snapshot_id,
            "corpus_digest": self.corpus_digest,
            "golden_set": self.golden_set,
            "golden_digest": self.golden_digest,
            "system_id": self.system_id,
            "system_config_digest": self.system_config_digest,
            "system_config": json.dumps(self.system_config, sort_keys=True, default=str),
            "judge_id": self.judge_id,
            "judge_config_digest": self.judge_config_digest,
            "judge_config": json.dumps(self.judge_config, sort_keys=True, default=str),
            "settings_digest": self.settings.digest,
            "settings": json.dumps(self.settings.as_dict(), sort_keys=True),
            "rebaseline": self.request.rebaseline,
            "rebaseline_reason": self.request.rebaseline_reason,
            "rebaseline_requested_by": self.request.requested_by,
            "rebaseline_for": self.request.rebaseline_for,
            "measures_version": self.measures_version,
        }

    def as_json(self) -> dict:
        """The record as plain data (``run.json`` in the run store, Dagster metadata)."""
        return {
            **self.as_row(),
            "system_config": dict(self.system_config),
            "judge_config": dict(self.judge_config),
            "settings": self.settings.as_dict(),
        }

    @classmethod
    def from_json(cls, document: Mapping) -> "EvalRunRecord":
        settings = dict(document["settings"])
        settings["cutoffs"] = tuple(settings["cutoffs"])
        return cls(
            suite=document["suite"],
            night=document["partition_date"],
            snapshot_id=document["snapshot_id"],
            corpus_digest=document["corpus_digest"],
            golden_set=document["golden_set"],
            golden_digest=document["golden_digest"],
            system_config=document["system_config"],
            judge_config=document["judge_config"],
            settings=RunSettings(**settings),
            request=RunRequest(
                rebaseline=bool(document["rebaseline"]),
                rebaseline_reason=document["rebaseline_reason"],
                requested_by=document["rebaseline_requested_by"],
                rebaseline_for=document["rebaseline_for"],
            ),
            measures_version=document.get("measures_version") or "",
        )


def handed_on(document: Mapping) -> "EvalRunRecord":
    """The record one step of a night hands the next, refused when it was begun with other
    measure definitions than this code computes: a night begun before an upgrade and
    re-executed after it would record figures of today's definitions under the earlier version
    (or none). Such a night is started again, which makes a new evaluation run."""
    record = EvalRunRecord.from_json(document)
    if record.measures_version != MEASURES_VERSION:
        begun = record.measures_version or UNRECORDED
        raise ConfigError(
            f"evaluation run {record.eval_run_id} was begun with measure definitions {begun}; "
            f"this code computes them as {MEASURES_VERSION}, so its figures would be recorded "
            "under the wrong definitions: materialize the night again from the start (a new "
            "evaluation run) rather than re-executing the earlier Dagster run"
        )
    return record


def measures_of(run: Mapping) -> str:
    """The measure definitions an ``eval_runs`` row was computed with (``UNRECORDED`` for a row
    written before they were recorded)."""
    return run.get("measures_version") or UNRECORDED


def run_changes(before: Mapping, after: Mapping) -> list[tuple[str, str, str]]:
    """What changed from one run to a later one that keeps them from comparing
    (``comparability``), as ``(what, before's, after's)``: ``"corpus"`` (the digest),
    ``"golden set"`` (the digest) and ``"measure definitions"`` (``measures_of``), in that order.
    A row without a ``golden_digest`` (a history that does not select it) keeps its golden
    set; one without a ``measures_version`` has ``UNRECORDED`` definitions."""
    pairs = [
        ("corpus", before["corpus_digest"], after["corpus_digest"]),
        ("golden set", before.get("golden_digest"), after.get("golden_digest")),
        ("measure definitions", measures_of(before), measures_of(after)),
    ]
    return [(what, old, new) for what, old, new in pairs if old != new]


def differences(candidate: Mapping, baseline: Mapping, *, other: str = "baseline") -> list[str]:
    """What keeps two runs from comparing (``comparability``), one phrase each; none when
    they compare."""
    problems = []
    if candidate["corpus_digest"] != baseline["corpus_digest"]:
        problems.append(
            f"corpus digest {candidate['corpus_digest'][:12]} (run {candidate['eval_run_id']}) "
            f"differs from {baseline['corpus_digest'][:12]} ({other} {baseline['eval_run_id']})"
        )
    if candidate["golden_digest"] != baseline["golden_digest"]:
        problems.append(
            f"golden-set digest {candidate['golden_digest'][:12]} differs from "
            f"{baseline['golden_digest'][:12]} ({other} {baseline['eval_run_id']})"
        )
    measured, measured_before = measures_of(candidate), measures_of(baseline)
    if measured != measured_before:
        problems.append(
            f"measure definitions {measured} (run {candidate['eval_run_id']}) differ from "
            f"{measured_before} ({other} {baseline['eval_run_id']})"
        )
    return problems


# The system the rebaseline job re-creates from a baseline's configuration.
REFERENCE_SYSTEM_ID = "reference-bm25"


def _is_night(value: object) -> bool:
    """Whether a partition date is a night (``YYYY-MM-DD``), not a warehouse's earliest
    ``adhoc`` runs."""
    try:
        dt.date.fromisoformat(str(value))
    except ValueError:
        return False
    return True


def comparability(
    candidate: Mapping, baseline: Mapping, *, other: str = "baseline"
) -> tuple[bool, str]:
    """Two runs compare when they share the corpus digest, the golden-set digest and the measure
    definitions (``measures_version``; a run recorded before it was recorded has none, and
    compares with no run that has one).

    Returns ``(comparable, reason)``; the reason names what differs and, when ``baseline`` is
    the suite's baseline (``other="baseline"``), the way forward: the re-baseline. Two runs
    compared by hand (``other="run"``) are named as runs, with no re-baseline advice (neither
    is the suite's baseline).
    """
    problems = differences(candidate, baseline, other=other)
    measured = measures_of(candidate)
    if not problems:
        return True, (
            f"same corpus digest {candidate['corpus_digest'][:12]}, golden-set digest "
            f"{candidate['golden_digest'][:12]} and measure definitions {measured}"
        )
    if other != "baseline":
        return False, "not comparable: " + "; ".join(problems)
    suite = candidate.get("suite")
    suite_option = f" --suite {suite}" if suite else ""
    night, baseline_night = candidate.get("partition_date"), baseline.get("partition_date")
    if _is_night(night) and _is_night(baseline_night) and str(night) < str(baseline_night):
        # A backfilled night: the advice below would move the baseline back to it.
        return False, (
            "not comparable: "
            + "; ".join(problems)
            + f". Night {night} is older than the baseline's night {baseline_night} (a backfill):"
            + " re-baselining to it would move the baseline back, and the nights after it would"
            + " no longer compare; compare it by hand with a run on its own snapshot"
            + f" (rag-eval compare {candidate.get('eval_run_id') or '<run>'} <run>), or backfill"
            + " older nights before the first scheduled night completes"
        )
    system = baseline.get("system_id")
    if system and system != REFERENCE_SYSTEM_ID:
        return False, (
            "not comparable: "
            + "; ".join(problems)
            + f". The baseline is system {system}, which the rebaseline job cannot re-run (it "
            + "re-creates only the reference system): accept this run as the new baseline with "
            + f"rag-eval accept-baseline {candidate.get('eval_run_id') or '<run>'}"
            + " --reason '<what changed>' (the change's own effect is then not measured)"
        )
    return False, (
        "not comparable: "
        + "; ".join(problems)
        + ". Re-baseline explicitly: rag-eval rebaseline"
        + f" --partition {candidate.get('partition_date') or '<night>'}"
        + suite_option
        + " --reason '<what changed>'"
        + " (or tag the run rag_eval/rebaseline=true with rag_eval/rebaseline_reason)"
    )
