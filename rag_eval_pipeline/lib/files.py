"""Writing a local file so that a reader sees the old file or the new one, never a partial one."""

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def replaced_atomically(path: Path | str) -> Iterator[Path]:
    """A temporary path beside ``path`` to write; renamed over ``path`` when the block ends
    without an error, removed when it raises. The folder is created if need be."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
    try:
        yield temporary
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)
