"""A full disk as one line that names what could not be written, and where.

The libraries that write Tailfill's files say only ``No space left on device`` (Arrow adds no path; SQLite
says ``database or disk is full``). :func:`naming_full_disk` wraps a write so that a full disk becomes a
:class:`~tailfill.errors.DiskFullError` naming the file or folder and what it was; every other error
passes through unchanged. Nothing is half-committed by it: the write it wraps is a step before a commit or
a whole-file replacement (:mod:`tailfill.plumbing.durable`), so the next run, once there is space, writes
it again.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from tailfill.errors import DiskFullError, unfixable_by_retry


def is_full_disk(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it was raised from) says the disk is full."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if unfixable_by_retry(exc) is DiskFullError:
            return True
        exc = exc.__cause__ or exc.__context__
    return False


@contextlib.contextmanager
def naming_full_disk(what: str, where: str | Callable[[], str]) -> Iterator[None]:
    """Turn a full disk while writing ``what`` at ``where`` (or what it returns, asked after the failure) into one
    :class:`DiskFullError` line."""
    try:
        yield
    except DiskFullError:
        raise
    except Exception as exc:
        if not is_full_disk(exc):
            raise
        path = where() if callable(where) else where
        raise DiskFullError(f"the disk is full: could not write {what} {path} (no space left on device)") from exc
