"""Table upkeep (``tailfill maintain``): compaction, snapshot expiry, orphan cleanup, and the proof after them.

Most tests commit synthetic micro-batches through the driver's real commit path
(:mod:`tailfill.dev.batches`: the executor's Parquet writer, then ``commit_prepared``) into real
pyiceberg tables; the last one runs maintenance beside a real Spark backfill and tail.
"""

from __future__ import annotations

import contextlib
import math
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from helpers import assert_exactly_once, backfill, high_watermarks, tables_of, tail, wait_until

from tailfill import cli
from tailfill.dev.batches import commit_sample_batch, prepare_sample
from tailfill.dev.sample import produce_sample
from tailfill.errors import PreparedFilesGone
from tailfill.lake.audit_log import audit_log
from tailfill.lake.files import written_by
from tailfill.offsets import OffsetRange
from tailfill.pipeline.handle import open_pipeline
from tailfill.plumbing.warehouse import filesystem, fs_path
from tailfill.proof.validate import validate
from tailfill.run.maintain import maintain, maintenance_settings
from tailfill.state.store import StateStore
from tailfill.upkeep.orphans import referenced_files, remove_orphans

pytestmark = pytest.mark.integration

PARTITIONS, PER_BATCH, BATCHES = 4, 50, 40
TARGET = 64 * 1024
TAILFILL = str(Path(sys.executable).parent / "tailfill")


def batch_ranges(cfg, b: int) -> list[OffsetRange]:
    return [OffsetRange(cfg.source.topic, p, b * PER_BATCH, (b + 1) * PER_BATCH) for p in range(PARTITIONS)]


def files_of(prepared) -> list[str]:
    """Every file a batch's prepared ranges wrote, data and quarantine."""
    return [f for p in prepared for f in p.files]


@pytest.fixture
def committed(make_pipeline):
    """40 micro-batches of 4 x 50 offsets (every 97th record malformed) in two runs: 160 small data files."""
    cfg = make_pipeline(maintenance__target_file_bytes=TARGET)
    with open_pipeline(cfg) as pipeline:
        for b in range(BATCHES):
            commit_sample_batch(pipeline, "run-a" if b < BATCHES // 2 else "run-b", b, batch_ranges(cfg, b),
                                bad_every=97)
    return cfg


@contextlib.contextmanager
def upkeep_looping(cfg, settings):
    """Run ``maintain`` over and over in a thread while the body runs; yields the list of its reports.

    A failure of upkeep fails the test (after the body), it is not swallowed."""
    stop, failures, runs = threading.Event(), [], []

    def loop() -> None:
        try:
            while not stop.is_set():
                runs.append(maintain(open_pipeline(cfg), settings))
        except Exception as exc:
            failures.append(exc)

    worker = threading.Thread(target=loop)
    worker.start()
    try:
        yield runs
    finally:
        stop.set()
        worker.join(timeout=300)
    assert not failures, failures


def live_files(table) -> list:
    table.refresh()
    return [t.file for t in table.scan().plan_files()]


def test_maintain_compacts_expires_and_the_proof_survives(committed, capsys):
    cfg = committed
    data, _ = tables_of(cfg)
    assert len(live_files(data)) == BATCHES * PARTITIONS

    assert cli.main(["maintain", cfg.path, "--expire-older-than", "0s", "--keep-last", "2"]) == 0
    out = capsys.readouterr().out
    assert f"compacted {BATCHES * PARTITIONS} files into" in out

    files = live_files(data)
    size = sum(f.file_size_in_bytes for f in files)
    assert len(files) <= math.ceil(size / TARGET) + PARTITIONS < BATCHES * PARTITIONS
    fs = filesystem(cfg.target)
    for f in files:  # one partition per file, offsets in order
        rows = pq.read_table(fs_path(f.file_path), filesystem=fs)
        assert len(set(rows["kafka_partition"].to_pylist())) == 1
        assert np.all(np.diff(rows["kafka_offset"].to_numpy()) > 0)

    # Every snapshot but the last two expired; the batch audit of the 39 expired batches was archived.
    assert len(data.snapshots()) == 2
    archived = audit_log(StateStore.of(cfg), data).archived()
    assert sorted(int(s["tailfill.batch-id"]) for s in archived) == list(range(BATCHES - 1))

    everything = validate(open_pipeline(cfg), all_runs=True)
    assert everything.success, everything.problems
    assert everything.offsets_checked == BATCHES * PARTITIONS * PER_BATCH
    assert everything.runs == ["run-a", "run-b"]
    # A run whose snapshots are all gone is still checked, offset by offset.
    first_run = validate(open_pipeline(cfg), run_id="run-a")
    assert first_run.success and first_run.offsets_checked == BATCHES // 2 * PARTITIONS * PER_BATCH
    assert_exactly_once(cfg, {p: BATCHES * PER_BATCH for p in range(PARTITIONS)})

    # Maintenance again: nothing left to compact or expire, nothing lost.
    assert cli.main(["maintain", cfg.path, "--expire-older-than", "0s", "--keep-last", "2"]) == 0
    assert "compacted 0 files" in capsys.readouterr().out
    assert validate(open_pipeline(cfg), all_runs=True).success


def test_damaged_files_are_named_by_the_ranges_they_held(committed, capsys):
    cfg = committed
    maintain(open_pipeline(cfg), maintenance_settings(cfg, "0s", 2))
    data, quarantine = tables_of(cfg)
    fs = filesystem(cfg.target)

    gone = live_files(data)[0]  # a compacted data file, deleted behind the table's back
    offsets = pq.read_table(fs_path(gone.file_path), filesystem=fs)
    partition = offsets["kafka_partition"][0].as_py()
    lo, hi = offsets["kafka_offset"][0].as_py(), offsets["kafka_offset"][-1].as_py()
    fs.delete_file(fs_path(gone.file_path))
    bad = live_files(quarantine)[0]  # a quarantine file overwritten with garbage
    bad_rows = pq.read_table(fs_path(bad.file_path), filesystem=fs)
    with fs.open_output_stream(fs_path(bad.file_path)) as f:
        f.write(b"not a parquet file")

    report = validate(open_pipeline(cfg), all_runs=True)
    assert not report.success
    held = OffsetRange(cfg.source.topic, partition, lo, hi + 1)
    [data_line] = [p for p in report.problems if p.startswith("unreadable data file")]
    assert data_line.startswith(f"unreadable data file {gone.file_path} held {held}: ")
    [q_line] = [p for p in report.problems if p.startswith("unreadable quarantine file")]
    assert q_line.startswith(f"unreadable quarantine file {bad.file_path} held ")
    # The offsets they held are missing, each named with its run and batch.
    missing = sum(p["missing"] for p in report.partitions)
    assert missing == offsets.num_rows + bad_rows.num_rows
    assert any(p.startswith(f"missing {cfg.source.topic}[{partition}]") for p in report.problems)
    page = fs.open_input_stream(fs_path(report.paths["html"])).read().decode()
    assert "Damaged files" in page and gone.file_path in page and str(held) in page

    # The command line: exit 1, the same lines, no traceback.
    proc = subprocess.run([TAILFILL, "validate", cfg.path, "--all"], capture_output=True, text=True, timeout=300,
                          env=os.environ)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stdout + proc.stderr
    assert data_line.split(": ")[0] in proc.stdout and "unreadable quarantine file" in proc.stdout


def test_orphan_cleanup_beside_commits_never_deletes_a_referenced_file(make_pipeline):
    """Upkeep loops (compaction, expiry, orphan cleanup with a 2 s safety age) while batches commit."""
    cfg = make_pipeline(maintenance__target_file_bytes=TARGET)
    fs = filesystem(cfg.target)
    # A killed attempt: files prepared for offsets that a later batch commits, never referenced, a day old.
    killed = prepare_sample(open_pipeline(cfg), "killed", batch_ranges(cfg, 0))
    orphans = files_of(killed)
    assert orphans and all(fs.get_file_info(fs_path(u)).type.name == "File" for u in orphans)
    day_ago = time.time() - 86_400
    for uri in orphans:
        os.utime(fs_path(uri), (day_ago, day_ago))

    settings = maintenance_settings(cfg, "0s", 3).model_copy(update={"orphan_min_age": "2s"})
    with upkeep_looping(cfg, settings) as upkeep_runs:
        started = time.monotonic()
        b = 0
        # Long enough for committed files to pass 2 s, and for upkeep to run at least twice beside the
        # commits however slow the machine is (bounded: a stuck upkeep fails the test).
        while b < 30 or time.monotonic() - started < 8 or len(upkeep_runs) < 2:
            assert time.monotonic() - started < 600, f"upkeep ran {len(upkeep_runs)} times in 600 s"
            try:
                commit_sample_batch(open_pipeline(cfg), "live", b, batch_ranges(cfg, b), bad_every=97)
            except PreparedFilesGone:  # prepared slower than the 2 s safety age: prepared again, as a restart does
                continue
            b += 1

    for table in tables_of(cfg):
        table.refresh()
        for path in referenced_files(table):  # every file any live snapshot references is there
            assert fs.get_file_info(path).type.name == "File", path
        remove_orphans(table, fs, 0)  # nothing else writes now: clean the rest
    assert all(fs.get_file_info(fs_path(u)).type.name == "NotFound" for u in orphans)
    assert_exactly_once(cfg, {p: b * PER_BATCH for p in range(PARTITIONS)})
    report = validate(open_pipeline(cfg), all_runs=True)
    assert report.success, report.problems
    assert report.offsets_checked == b * PARTITIONS * PER_BATCH


class DeletedMeanwhile:
    """The warehouse filesystem, where something else deletes every other file the cleanup is about to
    delete, between its listing and its deletion (as a commit deleting metadata files that fell off the
    metadata log does, or a second cleanup)."""

    def __init__(self, fs):
        self.fs, self.raced = fs, 0

    def get_file_info(self, *args):
        return self.fs.get_file_info(*args)

    def delete_file(self, path: str) -> None:
        if self.raced <= 0:  # the other deleter wins this one
            self.fs.delete_file(path)
            self.raced += 1
        else:
            self.raced -= 1
        self.fs.delete_file(path)


@pytest.mark.parametrize("warehouse", ["local", "s3"])
def test_orphan_cleanup_racing_a_deletion_succeeds(make_pipeline, request, warehouse):
    """A candidate deleted by someone else just before the cleanup deletes it is not an error; every
    orphan ends up gone and every referenced file stays."""
    s3 = request.getfixturevalue("seaweedfs").s3_endpoint if warehouse == "s3" else None  # a real object store
    cfg = make_pipeline(s3_endpoint=s3, maintenance__target_file_bytes=TARGET)
    with open_pipeline(cfg) as pipeline:
        for b in range(3):
            commit_sample_batch(pipeline, "live", b, batch_ranges(cfg, b), bad_every=97)
        killed = prepare_sample(pipeline, "killed", batch_ranges(cfg, 3), bad_every=97)  # prepared, never committed
    orphans = files_of(killed)
    assert {written_by(u) for u in orphans} == {"killed"}  # a file names its run (the fault suite relies on it)
    fs = filesystem(cfg.target)
    results = []
    for table in tables_of(cfg):
        results.append(remove_orphans(table, DeletedMeanwhile(fs), 0))
        for path in referenced_files(table):
            assert fs.get_file_info(path).type.name == "File", path
    assert all(fs.get_file_info(fs_path(u)).type.name == "NotFound" for u in orphans)
    assert sum(r.already_gone for r in results) == (len(orphans) + 1) // 2
    assert sum(len(r.deleted) for r in results) == len(orphans) // 2
    assert_exactly_once(cfg, {p: 3 * PER_BATCH for p in range(PARTITIONS)})
    report = validate(open_pipeline(cfg), all_runs=True)
    assert report.success, report.problems


class CommitsAtFirstDelete:
    """The warehouse filesystem, where a batch's commit lands just before the cleanup's first deletion: after the
    cleanup read the references, as a commit whose prepare took longer than the safety age can."""

    def __init__(self, fs, commit):
        self.fs, self.commit, self.result = fs, commit, None

    def get_file_info(self, *args):
        return self.fs.get_file_info(*args)

    def delete_file(self, path: str) -> None:
        if self.commit is not None:
            commit, self.commit = self.commit, None
            self.result = commit()
        self.fs.delete_file(path)


def backdated(prepared) -> list[str]:
    """The prepared files, their times set a day back: a batch that took longer than any safety age."""
    files = files_of(prepared)
    day_ago = time.time() - 86_400
    for uri in files:
        os.utime(fs_path(uri), (day_ago, day_ago))
    return files


@pytest.mark.parametrize("warehouse", ["local", "s3"])
def test_a_commit_landing_during_orphan_cleanup_never_references_a_deleted_file(make_pipeline, request, warehouse):
    """A batch prepared long ago commits after the cleanup took its files for orphans, before it deletes them:
    the commit copies them first (the cleanup fenced the table), so the table references only files that stay."""
    s3 = request.getfixturevalue("seaweedfs").s3_endpoint if warehouse == "s3" else None
    cfg = make_pipeline(s3_endpoint=s3)
    pipeline = open_pipeline(cfg)
    commit_sample_batch(pipeline, "early", 0, batch_ranges(cfg, 0), bad_every=7)
    late = prepare_sample(pipeline, "late", batch_ranges(cfg, 1), bad_every=7)
    fs = filesystem(cfg.target)
    if warehouse == "local":
        prepared = backdated(late)
        cutoff_age = 3_600
    else:  # an object's time cannot be set back: a cutoff after the files were written
        prepared = files_of(late)
        time.sleep(1.5)
        cutoff_age = 1
    data, quarantine = tables_of(cfg)
    racing = CommitsAtFirstDelete(fs, lambda: pipeline.committer(pipeline.provision_tables()).commit("late", 1, late))
    result = remove_orphans(data, racing, cutoff_age)
    remove_orphans(quarantine, fs, cutoff_age)

    assert racing.result is not None and racing.result[0].committed == batch_ranges(cfg, 1)
    for table in (data, quarantine):
        table.refresh()
        for path in referenced_files(table):
            assert fs.get_file_info(path).type.name == "File", path
    # The data table was fenced before the commit landed: it holds copies. The quarantine table's cleanup ran
    # after it: the prepared files are referenced there, and stay.
    assert not set(referenced_files(data)) & {fs_path(u) for u in prepared}
    assert {fs_path(u) for u in prepared if u.startswith(data.location().rstrip("/") + "/")} <= set(result.deleted)
    assert_exactly_once(cfg, {p: 2 * PER_BATCH for p in range(PARTITIONS)})
    report = validate(open_pipeline(cfg), all_runs=True)
    assert report.success, report.problems


def test_a_batch_whose_files_the_cleanup_took_commits_nothing_and_is_prepared_again(make_pipeline):
    """Prepared files deleted as orphans before the commit: one error naming the file, nothing committed; the
    batch prepared again commits."""
    cfg = make_pipeline()
    pipeline = open_pipeline(cfg)
    commit_sample_batch(pipeline, "early", 0, batch_ranges(cfg, 0))
    late = prepare_sample(pipeline, "late", batch_ranges(cfg, 1))
    prepared = backdated(late)
    for table in tables_of(cfg):
        remove_orphans(table, filesystem(cfg.target), 3_600)
    fs = filesystem(cfg.target)
    assert all(fs.get_file_info(fs_path(u)).type.name == "NotFound" for u in prepared)

    committer = pipeline.committer(pipeline.provision_tables())
    with pytest.raises(PreparedFilesGone, match=r"late-.*\.parquet is gone before its commit to .*nothing was "
                                                r"committed, and the batch is prepared again"):
        committer.commit("late", 1, late)
    assert_exactly_once(cfg, {p: PER_BATCH for p in range(PARTITIONS)})

    committer.commit("late", 1, prepare_sample(pipeline, "late", batch_ranges(cfg, 1)))
    assert_exactly_once(cfg, {p: 2 * PER_BATCH for p in range(PARTITIONS)})
    report = validate(open_pipeline(cfg), all_runs=True)
    assert report.success, report.problems



def test_maintenance_beside_a_backfill_and_a_tail(spark, make_pipeline):
    """Neither run fails because of upkeep committing to the same tables; nothing lost or duplicated."""
    cfg = make_pipeline(backfill__slices=2, backfill__max_offsets_per_batch=400, tail__min_offsets_per_batch=100,
                        tail__max_offsets_per_batch=300,
                        maintenance__target_file_bytes=TARGET)
    bs, topic = cfg.source.bootstrap_servers, cfg.source.topic
    produce_sample(bs, topic, 4_000, PARTITIONS, bad_every=97)
    settings = maintenance_settings(cfg, "0s", 2).model_copy(update={"orphan_min_age": "1h"})
    with upkeep_looping(cfg, settings) as runs:
        backfilled = backfill(spark, cfg)
        produce_sample(bs, topic, 1_500, PARTITIONS, bad_every=97)
        tailed = tail(spark, cfg)
        # At least one whole upkeep run after the last commit, however slow the machine: it has files to
        # compact and snapshots to expire (the one in progress may have started before the commits).
        after = len(runs)
        wait_until(lambda: len(runs) >= after + 2, "upkeep to run after the last commit", timeout=300)
    assert sum(r.offsets for r in backfilled) == 4_000 and sum(r.offsets for r in tailed) == 1_500
    assert any(t.compaction.files_removed for r in runs for t in r.tables)
    assert any(t.expiry.expired for r in runs for t in r.tables)
    assert_exactly_once(cfg, high_watermarks(cfg))
    report = validate(open_pipeline(cfg), all_runs=True)
    assert report.success, report.problems
    assert report.offsets_checked == 5_500


def test_maintain_on_an_s3_warehouse(make_pipeline, seaweedfs):
    """The same upkeep on a real object store (SeaweedFS's S3): compaction, the archive object, orphan listing,
    then every offset checked."""
    cfg = make_pipeline(s3_endpoint=seaweedfs.s3_endpoint, maintenance__target_file_bytes=TARGET)
    for b in range(12):
        commit_sample_batch(open_pipeline(cfg), "s3-run", b, batch_ranges(cfg, b), bad_every=97)
    report = maintain(open_pipeline(cfg), maintenance_settings(cfg, "0s", 2))
    data_report = report.asdict()["tables"][0]  # as the maintenance DAG's XCom has it
    assert data_report["compaction"]["files_removed"] == 12 * PARTITIONS
    assert data_report["expiry"]["archived"] == 11 and data_report["expiry"]["archive"].startswith("s3://")
    assert data_report["orphans"]["files_seen"] > 0
    data, _ = tables_of(cfg)
    assert len(audit_log(StateStore.of(cfg), data).archived()) == 11
    everything = validate(open_pipeline(cfg), all_runs=True)
    assert everything.success, everything.problems
    assert everything.offsets_checked == 12 * PARTITIONS * PER_BATCH


def test_maintain_stops_with_one_line_on_a_missing_file(committed, capsys):
    cfg = committed
    data, _ = tables_of(cfg)
    gone = live_files(data)[0]
    filesystem(cfg.target).delete_file(fs_path(gone.file_path))
    assert cli.main(["maintain", cfg.path]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: cannot compact: data file {gone.file_path} is unreadable (FileNotFoundError")
    assert len(live_files(data)) == BATCHES * PARTITIONS  # nothing was committed


def test_a_tail_without_a_maintenance_block_compacts_its_own_small_files_and_the_proof_holds(spark, make_pipeline):
    cfg = make_pipeline(maintenance=None, tail__upkeep_every_seconds=0.001, backfill__slices=1,
                        backfill__max_offsets_per_batch=400, tail__min_offsets_per_batch=200,
                        tail__max_offsets_per_batch=400)
    bs, topic = cfg.source.bootstrap_servers, cfg.source.topic
    produce_sample(bs, topic, 2_000, PARTITIONS, bad_every=97)
    backfill(spark, cfg)  # batches of 400: small files, one per Kafka partition and batch
    data, _ = tables_of(cfg)
    small = len(live_files(data))
    assert small >= 4 * PARTITIONS
    produce_sample(bs, topic, 800, PARTITIONS, bad_every=97)
    [result] = tail(spark, cfg)  # an upkeep after its first batch (and any due later), waited for at its end

    files = live_files(data)
    assert [s for s in data.snapshots() if s.summary.additional_properties.get("tailfill.maintenance") == "compaction"]
    # the backfill's 20 files compacted into one per Kafka partition; at most the tail's last two batches' beside them
    assert len(files) <= PARTITIONS + 2 * PARTITIONS < small
    assert_exactly_once(cfg, high_watermarks(cfg))
    everything = validate(open_pipeline(cfg), all_runs=True)  # the proof and the batch audit after the upkeep
    assert everything.success, everything.problems
    assert everything.offsets_checked == 2_800
    assert validate(open_pipeline(cfg), run_id=result.run_id).success
