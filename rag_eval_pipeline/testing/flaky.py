"""A nightly job whose retrieval fails in one shard while a file exists: re-execution tests.

``FlakyReferenceSystemResource`` is the reference system (same configuration, so the same
``eval_run_id``) except that building it for shard ``fail_part`` raises while ``fail_while``
exists. ``flaky_nightly`` is the evaluation job over it, rebuilt by name so Dagster's
``execute_job`` and re-execution from failure can load it:

    job = dg.build_reconstructable_job(
        "rag_eval_pipeline.testing.flaky", "flaky_nightly", reconstructable_kwargs={...}
    )
"""

from pathlib import Path

import dagster as dg
import polars as pl

from rag_eval_pipeline.defs.partitions import nightly_partitions
from rag_eval_pipeline.defs.resources import ReferenceSystemResource
from rag_eval_pipeline.lib.systems.protocol import SystemUnderTest
from rag_eval_pipeline.testing import evaluation_assets, evaluation_resources, names


class InjectedShardFailure(RuntimeError):
    """The failure the flaky system was told to raise."""


class FlakyReferenceSystemResource(ReferenceSystemResource):
    """The reference system, failing in one shard while a file exists (module docstring)."""

    fail_part: str
    fail_while: str

    def build(
        self, passages: pl.DataFrame, capture: Path | None = None, cache=None
    ) -> SystemUnderTest:
        if (
            capture is not None
            and capture.stem == self.fail_part
            and Path(self.fail_while).exists()
        ):
            raise InjectedShardFailure(f"{self.fail_part} fails while {self.fail_while} exists")
        return super().build(passages, capture, cache)


def flaky_nightly(
    *, suites: str, warehouse: str, gates: str, shards: int, fail_part: str, fail_while: str
) -> dg.JobDefinition:
    """The nightly graph on the in-process executor, with the flaky reference system."""
    assets = [a for a in evaluation_assets(Path(gates)) if "run_comparison" not in names(a)]
    system = FlakyReferenceSystemResource(
        evidence_threshold=1.0, fail_part=fail_part, fail_while=fail_while
    )
    job = dg.define_asset_job(
        "flaky_nightly",
        selection=dg.AssetSelection.assets(*assets),
        partitions_def=nightly_partitions("UTC"),
        executor_def=dg.in_process_executor,
    )
    return dg.Definitions(
        assets=assets,
        jobs=[job],
        resources=evaluation_resources(
            suites=Path(suites), warehouse=Path(warehouse), system=system, shards=shards
        ),
    ).resolve_job_def("flaky_nightly")
