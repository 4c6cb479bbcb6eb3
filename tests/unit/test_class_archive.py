"""The Spark driver's class archive: where it is kept, when a JVM maps it, and how a first run's dump settles."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tailfill.run import class_archive, runtime
from tailfill.settings import settings


@pytest.fixture
def archives(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("TAILFILL_CLASS_ARCHIVE_DIR", str(tmp_path / "jvm"))
    return tmp_path / "jvm"


def test_kept_in_the_user_cache_unless_switched_off():
    assert settings({"HOME": "/u"}).class_archive_dir == Path("/u/.cache/tailfill/jvm")
    assert settings({"HOME": "/u", "XDG_CACHE_HOME": "/c"}).class_archive_dir == Path("/c/tailfill/jvm")
    assert settings({"TAILFILL_CLASS_ARCHIVE_DIR": "off"}).class_archive_dir is None


def test_switched_off_means_no_dump_and_no_options(monkeypatch):
    monkeypatch.setenv("TAILFILL_CLASS_ARCHIVE_DIR", "off")
    assert class_archive.dump_for("-XX:+UseSerialGC") is None
    assert class_archive.use_options("-XX:+UseSerialGC") == ""


def test_one_archive_per_set_of_jvm_options(archives):
    a, b = class_archive.archive_path("-XX:+UseSerialGC"), class_archive.archive_path("-XX:+UseG1GC")
    assert a is not None and b is not None and a != b and a.parent == b.parent == archives


def test_the_first_run_dumps_and_its_archive_is_mapped_once_settled(archives):
    options = "-XX:+UseSerialGC"
    dump = class_archive.dump_for(options)
    assert dump is not None and f"-XX:ArchiveClassesAtExit={dump.scratch}" in dump.options
    assert class_archive.use_options(options) == ""  # nothing to map before the first JVM ended
    dump.scratch.write_bytes(b"classes")  # what the JVM writes at exit
    dump.settle(0)
    assert dump.path.read_bytes() == b"classes" and not dump.scratch.exists()
    assert f"-XX:SharedArchiveFile={dump.path}" in class_archive.use_options(options)
    assert class_archive.dump_for(options) is None  # later runs map it, none writes another


def test_a_killed_run_or_a_second_first_run_leaves_nothing_behind(archives):
    options = "-XX:+UseSerialGC"
    killed, first, second = (class_archive.dump_for(options) for _ in range(3))
    for dump in (killed, first, second):
        dump.scratch.write_bytes(b"classes")
    killed.settle(-9)  # a JVM killed mid-write: its file is not an archive to trust
    assert not killed.path.exists() and not killed.scratch.exists()
    first.settle(0)
    second.scratch.write_bytes(b"other")
    second.settle(0)
    assert first.path.read_bytes() == b"classes"
    assert sorted(p.name for p in archives.iterdir()) == [first.path.name]


def test_the_warm_up_writes_the_archive_that_its_jvm_wrote(archives, monkeypatch):
    from tailfill.run import class_warmup

    jvm = "import sys; open(sys.argv[1], 'wb').write(b'classes')"  # in place of the JVM that writes at exit
    monkeypatch.setattr(class_warmup, "warmup_command", lambda dump: [sys.executable, "-c", jvm, str(dump.scratch)])
    line = class_warmup.write_class_archive()
    path = class_archive.archive_path(runtime.JVM_OPTIONS)
    assert line == f"class archive: written to {path}" and path.read_bytes() == b"classes"
    assert class_warmup.write_class_archive() == f"class archive: {path}"  # there already: no second warm-up


def test_a_failed_warm_up_leaves_no_archive_and_says_so(archives, monkeypatch):
    from tailfill.run import class_warmup

    monkeypatch.setattr(class_warmup, "warmup_command", lambda dump: [sys.executable, "-c", "raise SystemExit(3)"])
    assert class_warmup.write_class_archive() == ("class archive: the warm-up job ended with exit code 3; jobs "
                                                  "start without one")
    assert list(archives.iterdir()) == []


def test_no_warm_up_when_archives_are_off(monkeypatch):
    from tailfill.run import class_warmup

    monkeypatch.setenv("TAILFILL_CLASS_ARCHIVE_DIR", "off")
    monkeypatch.setattr(class_warmup, "warmup_command", lambda dump: pytest.fail("no job when archives are off"))
    assert class_warmup.write_class_archive() == "class archive: off"
