"""The nightly partitions: one partition per night and suite.

A partition key is a night (a date in the platform team's time zone) and a suite; two suites
evaluated on one night never share a materialization, and the asset pages show each suite's
nights apart. Suites are dynamic partitions: a new suite file becomes a partition when it is first
run (``rag-eval nightly --suite``) or scheduled, without reloading the code location.
"""

import warnings

import dagster as dg

from rag_eval_pipeline.lib.deployment import FIRST_NIGHT
from rag_eval_pipeline.lib.errors import ConfigError

NIGHT = "night"
SUITE = "suite"

suite_partitions = dg.DynamicPartitionsDefinition(name=SUITE)


def nightly_partitions(
    timezone: str, first_night: str = FIRST_NIGHT
) -> dg.MultiPartitionsDefinition:
    """Night (daily from ``first_night``, named by the date the run happens on,
    ``end_offset=1``) x suite."""
    return dg.MultiPartitionsDefinition(
        {
            NIGHT: dg.DailyPartitionsDefinition(
                start_date=first_night, timezone=timezone, end_offset=1
            ),
            SUITE: suite_partitions,
        }
    )


def nightly_check(
    name: str, *, asset: str, partitions: dg.PartitionsDefinition, **options
) -> dg.AssetCheckSpec:
    """An asset check partitioned as its asset is (night x suite), so the UI shows each night's
    result on its own (a check's Partitions tab) rather than the newest of any night.
    Partitioned checks are a Dagster preview; its warning is silenced here, where they are
    made."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.PreviewWarning)
        return dg.AssetCheckSpec(name, asset=asset, partitions_def=partitions, **options)


def check_night(
    night: str, timezone: str, option: str = "--partition", first_night: str = FIRST_NIGHT
) -> str:
    """``night`` if it is a night of the partitions (from ``first_night`` to today in
    ``timezone``), else a ``ConfigError`` naming the option and the nights there are."""
    nights = nightly_partitions(timezone, first_night).get_partitions_def_for_dimension(NIGHT)
    keys = nights.get_partition_keys()
    if night not in keys:
        earlier = (
            f"; for earlier nights set RAG_EVAL_FIRST_NIGHT (now {first_night})"
            if keys and night < keys[0]
            else ""
        )
        span = f"nights run from {keys[0]} to {keys[-1]}" if keys else "there are no nights yet"
        raise ConfigError(f"{option} {night}: no such night; {span} (today in {timezone}){earlier}")
    return night


def partition_key(night: str, suite: str) -> str:
    """The partition key string of a night and a suite (``2026-10-15|procedures``)."""
    return str(dg.MultiPartitionKey({NIGHT: night, SUITE: suite}))


def night_and_suite(context: dg.AssetExecutionContext | dg.OpExecutionContext) -> tuple[str, str]:
    """The night and the suite of the partition being materialized."""
    key = context.partition_key
    dimensions = (
        key.keys_by_dimension
        if isinstance(key, dg.MultiPartitionKey)
        else dict(zip((NIGHT, SUITE), key.split("|"), strict=True))
    )
    return dimensions[NIGHT], dimensions[SUITE]
