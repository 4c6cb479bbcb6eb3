"""The one retry helper, whole-object writes and the one lock."""

from __future__ import annotations

import pyarrow.fs as pafs
import pytest

from tailfill.plumbing.durable import locked, write_whole
from tailfill.plumbing.retry import retrying


class Conflict(Exception):
    pass


def attempts_until(succeeds_at: int, fail_with: type[Exception] = Conflict, tries: int = 5) -> list[int]:
    seen: list[int] = []
    for attempt in retrying(tries, on=Conflict):
        with attempt:
            seen.append(attempt.retry_state.attempt_number)
            if len(seen) < succeeds_at:
                raise fail_with("not yet")
    return seen


def test_a_failure_it_is_told_of_is_tried_again_until_it_succeeds():
    assert attempts_until(3) == [1, 2, 3]


def test_the_last_failure_is_raised_as_it_is_and_others_at_once():
    with pytest.raises(Conflict, match="not yet"):
        attempts_until(9, tries=4)
    with pytest.raises(KeyError):
        attempts_until(3, fail_with=KeyError)


def test_only_the_failures_the_predicate_admits_are_tried_again():
    seen = []
    with pytest.raises(Conflict, match="fatal"):
        for attempt in retrying(5, on=Conflict, when=lambda exc: "fatal" not in str(exc)):
            with attempt:
                seen.append(1)
                raise Conflict("fatal" if len(seen) == 2 else "again")
    assert len(seen) == 2


def test_write_whole_on_a_filesystem_and_locally_leaves_one_whole_object(tmp_path):
    write_whole(f"file://{tmp_path}/a/report.json", '{"v": 1}', pafs.LocalFileSystem())
    write_whole(tmp_path / "a" / "report.json", b'{"v": 2}')
    assert (tmp_path / "a" / "report.json").read_text() == '{"v": 2}'
    assert [p.name for p in (tmp_path / "a").iterdir()] == ["report.json"]


def test_locked_hands_the_file_over_held(tmp_path):
    with locked(tmp_path / "x.lock") as handle:
        handle.write("held")
    assert (tmp_path / "x.lock").read_text() == "held"
