"""Shards: a stable split of a run's golden items, so per-item work can spread over workers.

An item's shard is ``int(sha256(item_id)[:16], 16) mod shards``: it depends on the item's id
alone, so a re-run (or a night with other items added) puts every item in the same shard. The
number of shards is an execution setting, not part of the run's identity: every figure is the same
for any number of shards, item by item.

Each shard writes its rows as its own Parquet part (``shard-0003``) under the run's folder, so a
shard that is re-run replaces its part and nothing else; the step after the shards checks that
every part is there.
"""

import hashlib
from dataclasses import asdict, dataclass

import polars as pl

from rag_eval_pipeline.lib.errors import ConfigError, RagEvalError

MAX_SHARDS = 4096


def check_shards(shards: int) -> int:
    if isinstance(shards, bool) or not isinstance(shards, int) or not 1 <= shards <= MAX_SHARDS:
        raise ConfigError(
            f"setting 'shards' must be an integer from 1 to {MAX_SHARDS}, got {shards!r}"
        )
    return shards


def shard_of(item_id: str, shards: int) -> int:
    """The shard of one item (module docstring)."""
    return int(hashlib.sha256(item_id.encode("utf-8")).hexdigest()[:16], 16) % shards


def part_name(shard: int) -> str:
    """The Parquet part a shard writes: ``shard-0003``."""
    return f"shard-{shard:04d}"


def items_of_shard(items: pl.DataFrame, shard: int, shards: int) -> pl.DataFrame:
    """The rows of ``items`` (an ``item_id`` column) in one shard, in their order."""
    if shards == 1:
        return items
    ids = items["item_id"].to_list()
    keep = [shard_of(item_id, shards) == shard for item_id in ids]
    return items.filter(pl.Series(keep, dtype=pl.Boolean))


@dataclass(frozen=True)
class ShardSpec:
    """One shard of one run, as the planning step hands it to a shard step."""

    eval_run_id: str
    record: dict
    shard: int
    shards: int

    @property
    def part(self) -> str:
        return part_name(self.shard)

    @property
    def mapping_key(self) -> str:
        return self.part.replace("-", "_")

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, document: dict) -> "ShardSpec":
        """The spec of a planning or shard output (which may carry more keys)."""
        return cls(**{key: document[key] for key in ("eval_run_id", "record", "shard", "shards")})


class MissingShardError(RagEvalError):
    """A step after the shards found a shard's part missing."""


def check_parts(parts: list[str], shards: int, where: str) -> None:
    """Every shard's part is present under ``where`` (and no stray one)."""
    expected = {part_name(shard) for shard in range(shards)}
    missing = sorted(expected - set(parts))
    if missing:
        raise MissingShardError(
            f"{where}: shard part(s) {', '.join(missing)} missing of {shards}: re-run those shards"
        )
