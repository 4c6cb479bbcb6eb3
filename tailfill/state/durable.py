"""Local files that a kill at any moment leaves whole: atomic rewrites.

Every process of a run may be SIGKILLed between any two instructions. A file rewritten in place
can then be left empty or half-written; :func:`write_atomic` replaces a file in one rename instead.
Shared run state has no appended logs at all: one whole object per record (:mod:`tailfill.state.store`).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, data: str | bytes) -> None:
    """Replace ``path`` with ``data`` in one rename: a reader sees the old file or the new one, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
