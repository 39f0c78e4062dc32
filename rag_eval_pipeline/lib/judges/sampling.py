"""Seeded, stratified sampling of answered traces for the judge."""

import hashlib

import polars as pl


def stable_seed(*parts: object) -> int:
    """A 63-bit seed derived from the parts, identical on every machine and Python."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def stratified_sample(frame: pl.DataFrame, size: int, *, by: str, seed: int) -> pl.DataFrame:
    """Up to ``size`` rows, allocated to each ``by`` group in proportion to its size (largest
    remainders), at least one row from every group while ``size`` allows; rows drawn without
    replacement with a seed derived from ``seed`` and the group. The whole frame when it is no
    larger than ``size``; no rows (the frame's columns) for a size of 0."""
    if frame.height <= size:
        return frame
    counts = frame.group_by(by).len().sort(by)
    groups = counts[by].to_list()
    sizes = counts["len"].to_list()
    allocation = [min(1, n) if size >= len(groups) else 0 for n in sizes]
    remaining = size - sum(allocation)
    total = sum(sizes)
    quotas = [remaining * n / total for n in sizes]
    extra = [min(int(q), n - a) for q, n, a in zip(quotas, sizes, allocation, strict=True)]
    allocation = [a + e for a, e in zip(allocation, extra, strict=True)]
    order = sorted(range(len(groups)), key=lambda i: (-(quotas[i] - int(quotas[i])), groups[i]))
    for i in order * 2:
        if sum(allocation) >= size:
            break
        if allocation[i] < sizes[i]:
            allocation[i] += 1
    parts = [
        frame.filter(pl.col(by) == group)
        .sort("item_id")
        .sample(n=take, seed=stable_seed(seed, group) % 2**32)
        for group, take in zip(groups, allocation, strict=True)
        if take
    ]
    if not parts:  # a size of 0: nothing is judged
        return frame.clear()
    return pl.concat(parts).sort("item_id")
