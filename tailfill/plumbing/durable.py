"""Files that a kill at any moment leaves whole, and one lock between processes.

Every process of a run may be SIGKILLed between any two instructions. :func:`write_whole` replaces a
file or a warehouse object in one step (a local file by one rename, an S3 object by one PUT), so a
reader sees the old one or the new one, never half; a kill leaves at most a hidden ``.<name>.*.tmp``
that no reader lists. :func:`locked` holds one advisory file lock (released if the process dies).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pyarrow.fs as pafs

from tailfill.plumbing.disk import naming_full_disk
from tailfill.plumbing.warehouse import fs_path


def write_whole(target: str | Path, data: str | bytes, fs: pafs.FileSystem | None = None) -> None:
    """Replace ``target`` (a local path, or a URI on ``fs``) with ``data`` in one step.

    Local: a hidden temporary file beside it, then one rename; on S3: one PUT, visible only when complete.
    """
    with naming_full_disk("the file", str(target)):
        _write_whole(target, data, fs)


def _write_whole(target: str | Path, data: str | bytes, fs: pafs.FileSystem | None) -> None:
    raw = data.encode() if isinstance(data, str) else data
    if fs is not None and not isinstance(fs, pafs.LocalFileSystem):
        with fs.open_output_stream(fs_path(str(target))) as out:
            out.write(raw)
        return
    path = Path(fs_path(str(target)))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(raw)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def locked(path: Path, mode: str = "a") -> Iterator[IO]:
    """``path`` opened (created if need be) and held under an exclusive lock: one process at a time."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open(mode) as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield handle
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
