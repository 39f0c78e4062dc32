"""The nightly partitioning: one partition a day, in the time zone the platform team runs in.

The time zone comes from ``RAG_EVAL_TIMEZONE`` (default UTC); it fixes both the partition
boundaries and the wall-clock time of the 02:00 schedule.
"""

import os

import dagster as dg

TIMEZONE = os.environ.get("RAG_EVAL_TIMEZONE", "UTC")
FIRST_NIGHT = "2026-10-01"

nightly_partitions = dg.DailyPartitionsDefinition(
    start_date=FIRST_NIGHT, timezone=TIMEZONE, end_offset=1
)
