"""A full disk becomes one line naming what could not be written and where; other errors pass unchanged."""

import errno

import pytest

from tailfill.errors import DiskFullError, ErrorInfo
from tailfill.plumbing.disk import is_full_disk, naming_full_disk


def test_the_signs_of_a_full_disk_from_the_os_arrow_and_sqlite():
    assert is_full_disk(OSError(errno.ENOSPC, "No space left on device"))
    assert is_full_disk(OSError("[Errno 28] Error writing bytes to file. Detail: [errno 28] No space left on device"))
    assert is_full_disk(RuntimeError("(sqlite3.OperationalError) database or disk is full"))
    wrapped = RuntimeError("could not create .gitignore")
    wrapped.__cause__ = OSError(errno.ENOSPC, "No space left on device")
    assert is_full_disk(wrapped)
    assert not is_full_disk(OSError(errno.EACCES, "Permission denied"))
    assert not is_full_disk(ValueError("bad value"))


def test_a_full_disk_names_the_file_asked_after_the_failure():
    made: list[str] = []
    with pytest.raises(DiskFullError) as caught, naming_full_disk("a data file", lambda: made[-1]):
        made.append("/lake/t/data/run-1.parquet")
        raise OSError(errno.ENOSPC, "No space left on device")
    assert str(caught.value) == ("the disk is full: could not write a data file /lake/t/data/run-1.parquet "
                                 "(no space left on device)")
    info = ErrorInfo.of(caught.value)  # as it crosses to the driver: the line and its fix
    assert info.error_class == "DiskFullError" and info.retryable and "free space" in info.fix


def test_other_errors_pass_through_unchanged():
    with pytest.raises(PermissionError), naming_full_disk("the file", "/x"):
        raise PermissionError(errno.EACCES, "Permission denied")
