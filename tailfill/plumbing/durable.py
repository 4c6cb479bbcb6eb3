"""Files that a kill at any moment leaves whole, and one lock between processes.

Every process of a run may be SIGKILLed between any two instructions. :func:`write_whole` replaces a
file or a warehouse object in one step (a local file by one rename, an S3 object by one PUT), so a
reader sees the old one or the new one, never half; a kill leaves at most a hidden ``.<name>.*.tmp``
that no reader lists. :func:`create_whole` writes a name only if nothing is there (one of two racing processes
wins). :func:`locked` holds one advisory file lock (released if the process dies).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

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
    _through_temporary(Path(fs_path(str(target))), raw, os.replace)


def create_whole(target: str | Path, data: str | bytes, fs: pafs.FileSystem | None = None, s3: Any = None) -> bool:
    """Write ``target`` whole only if nothing is there yet; True if this call made it, False if something was there.

    Two processes that race to create one name: exactly one makes it. Local: a whole temporary file linked to the
    name (a link never replaces); on S3 (``s3``: a boto3 client, :func:`~tailfill.plumbing.warehouse.s3_client`):
    one PUT with ``If-None-Match: *``, which the store refuses when the object exists.
    """
    with naming_full_disk("the file", str(target)):
        raw = data.encode() if isinstance(data, str) else data
        if fs is not None and not isinstance(fs, pafs.LocalFileSystem):
            return _put_if_absent(s3, fs_path(str(target)), raw)
        try:
            _through_temporary(Path(fs_path(str(target))), raw, os.link)
        except FileExistsError:
            return False
        return True


def _through_temporary(path: Path, raw: bytes, publish: Callable[[str, Path], None]) -> None:
    """``raw`` into a hidden temporary file beside ``path``, then put there by ``publish`` in one step (a rename
    replaces, a link only creates); the temporary file never outlives the call."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(raw)
        publish(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def _put_if_absent(s3: Any, key_path: str, raw: bytes) -> bool:
    """A conditional PUT of ``bucket/key``; False when the store says an object is there (412, or 409 while another
    conditional PUT of it is in flight)."""
    from botocore.exceptions import ClientError

    if s3 is None:
        raise ValueError(f"a conditional write of {key_path} on S3 needs an S3 client")
    bucket, _, key = key_path.partition("/")
    try:
        s3.put_object(Bucket=bucket, Key=key, Body=raw, IfNoneMatch="*")
    except ClientError as exc:
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if status in (409, 412) or exc.response.get("Error", {}).get("Code") == "PreconditionFailed":
            return False
        raise
    return True


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
