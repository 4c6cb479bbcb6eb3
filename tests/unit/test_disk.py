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
    assert info.error_class == "DiskFullError" and not info.retryable and "free space" in info.fix


def test_other_errors_pass_through_unchanged():
    with pytest.raises(PermissionError), naming_full_disk("the file", "/x"):
        raise PermissionError(errno.EACCES, "Permission denied")


@pytest.mark.parametrize(("error", "kind", "fix"), [
    (OSError(errno.ENOSPC, "No space left on device"), "DiskFullError", "free space"),
    (OSError(errno.EACCES, "Permission denied", "/lake/t/data"), "PermissionDenied", "the right to read and write"),
    (OSError("When uploading part for key 'w/t/x.parquet' in bucket 'lake': AWS Error ACCESS_DENIED during "
             "UploadPart operation: Access Denied"), "PermissionDenied", "credentials of target.s3"),
    (OSError("Bucket 'lake' not found. AWS Error NO_SUCH_BUCKET: The specified bucket does not exist"), "StoreGone",
     "create the bucket"),
])
def test_errors_no_restart_can_fix_stop_the_run_at_once_with_their_fix(error, kind, fix):
    from tailfill.run.restarts import Failure, RestartPolicy

    info = ErrorInfo.of(error)
    assert (info.error_class, info.retryable) == (kind, False) and fix in info.fix, info
    _, decision = RestartPolicy(tolerated=3, backoff_seconds=1).start().after(Failure(info))
    assert decision.stop is not None  # no restart, no wait: the first failure ends the run


def test_a_jvm_failure_known_by_its_text_alone_is_classified_too():
    info = ErrorInfo.foreign("StreamingQueryException", "java.io.IOException: No space left on device\n\tat x")
    assert (info.error_class, info.retryable) == ("DiskFullError", False)
    assert ErrorInfo.foreign("StreamingQueryException", "java.net.SocketTimeoutException: Read timed out").retryable


def test_validation_on_a_full_disk_leaves_the_great_expectations_project_where_it_is(tmp_path, monkeypatch):
    from tailfill.proof import expectations

    (tmp_path / "gx").mkdir()
    (tmp_path / "gx" / "great_expectations.yml").write_text("kept")

    def full(*_args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(expectations, "_run_suites", full)
    with pytest.raises(DiskFullError) as caught, naming_full_disk("the validation results under", str(tmp_path)):
        expectations.run_suites(tmp_path, [], "all")
    assert str(caught.value) == (f"the disk is full: could not write the validation results under {tmp_path} (no "
                                 "space left on device)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gx"]  # nothing moved aside, nothing built anew
