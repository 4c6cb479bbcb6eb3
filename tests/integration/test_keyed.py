"""Keyed tables on the real catalog and warehouse: Debezium change streams prepared as executors prepare them,
committed by the driver's keyed commit, read back with pyiceberg and DuckDB, proven by ``validate``.

Each state table must equal an independent fold of the produced changes (each key's last change by
offset; deletes remove it), whatever order the batches commit in, across failures between the two
tables' commits and replays of committed batches.
"""

from __future__ import annotations

import os
import random
import subprocess
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
from helpers import backfill, kill_job_tree, offline_duckdb, tail
from pyiceberg.expressions import EqualTo

from tailfill.config import MaintenanceConfig
from tailfill.dev.change_stream import Change, avro_changes, change_stream, ends, fold, produce_changes, records
from tailfill.errors import ChangeStreamError, InjectedFault, LakeError
from tailfill.lake.keyed import applied_ranges, state_counts
from tailfill.lake.ledger import read_ledger
from tailfill.lake.prepare import Destination, prepare_ranges
from tailfill.lake.schema_change import table_columns
from tailfill.offsets import OffsetRange, subtract
from tailfill.pipeline.handle import Pipeline
from tailfill.proof import keyed as keyed_proof
from tailfill.proof.result import ValidationResult
from tailfill.proof.validate import validate
from tailfill.run.maintain import maintain
from tailfill.run.planner import backfill_spec
from tailfill.run.status import keyed_status
from tailfill.run.submit import spark_submit_command, submit_env

pytestmark = pytest.mark.integration

def batches(changes: list[Change], topic: str, step: int, start: dict[int, int] | None = None,
            end: dict[int, int] | None = None) -> list[list[OffsetRange]]:
    """The offsets of ``changes`` (between ``start`` and ``end`` per partition) as batches of ``step`` offsets."""
    last = end or ends(changes)
    first = start or dict.fromkeys(last, 0)
    out = []
    for lo in range(min(first.values()), max(last.values()), step):
        batch = [OffsetRange(topic, p, max(lo, first[p]), min(lo + step, last[p])) for p in last
                 if max(lo, first[p]) < min(lo + step, last[p])]
        if batch:
            out.append(batch)
    return out


def commit(pipeline: Pipeline, changes: list[Change], ranges: list[OffsetRange], run_id: str, batch_id: int,
           committer=None):
    """Prepare ``ranges`` of ``changes`` as an executor does, and commit them with the pipeline's keyed commit."""
    tables = pipeline.open_tables()
    committer = committer or pipeline.committer(tables)
    where = Destination(pipeline.fs, tables.data.location(), tables.quarantine.location())
    topic = pipeline.cfg.source.topic
    prepared = prepare_ranges(lambda todo: records(topic, changes, todo), pipeline.format.decoder(), where, run_id,
                              ranges, table_columns(tables.data))
    return committer.commit(run_id, batch_id, prepared)


def ingest(pipeline: Pipeline, changes: list[Change], plan: list[list[OffsetRange]], run_id: str) -> None:
    committer = pipeline.committer(pipeline.open_tables())
    for b, ranges in enumerate(plan):
        commit(pipeline, changes, ranges, run_id, b, committer)


def state_by_pyiceberg(pipeline: Pipeline) -> dict[int, tuple[int, int]]:
    rows = pipeline.open_state_table().scan(selected_fields=("order_id", "kafka_partition", "kafka_offset")).to_arrow()
    out = {r["order_id"]: (r["kafka_partition"], r["kafka_offset"]) for r in rows.to_pylist()}
    assert len(out) == rows.num_rows, "a key has two rows in the state"
    return out


def state_by_duckdb(pipeline: Pipeline) -> dict[int, tuple[int, int]]:
    rows = offline_duckdb().execute("SELECT order_id, kafka_partition, kafka_offset FROM iceberg_scan(?)",
                                    [pipeline.open_state_table().metadata_location]).fetchall()
    out = {k: (p, o) for k, p, o in rows}
    assert len(out) == len(rows), "a key has two rows in the state"
    return out


def assert_state_is_the_fold(pipeline: Pipeline, changes: list[Change]) -> ValidationResult:
    """The state table (read by pyiceberg and by DuckDB) is the fold of ``changes``, and validation of all runs
    proves it; returns that proof."""
    expected = fold(changes)
    assert state_by_pyiceberg(pipeline) == expected
    assert state_by_duckdb(pipeline) == expected
    proof = validate(pipeline, all_runs=True)
    assert proof.success, proof.problems
    assert proof.state["differing"] == 0 and proof.state["keys_checked"] >= len(expected)
    return proof


def test_debezium_stream_lands_as_the_fold_of_its_changes(cdc):
    pipeline = cdc()
    changes = change_stream(4000, 600, partitions=3, wrapped=True, snapshot=200)
    ingest(pipeline, changes, batches(changes, pipeline.cfg.source.topic, 400), "run-a")

    assert_state_is_the_fold(pipeline, changes)
    counts = state_counts(pipeline.open_state_table())
    assert counts.changes == len(changes)  # every change (tombstones included) is one outcome
    assert counts.inserted and counts.updated and counts.deleted and counts.superseded
    data = pipeline.open_tables().data
    ops = data.scan(selected_fields=("cdc_op", "cdc_lsn")).to_arrow()
    assert set(ops["cdc_op"].to_pylist()) == {"r", "c", "u", "d"} and ops["cdc_lsn"].null_count > 0  # tombstones
    run = validate(pipeline, run_id="run-a").state["run_counts"]
    assert run == counts.to_dict()  # the one run made every merge
    status = keyed_status(data, pipeline.open_state_table(), ("order_id",))
    assert status[0].endswith(f"keyed by ['order_id']: {len(fold(changes)):,} live rows; up to date with the "
                              "change log")
    assert status[1] == (f"  all merges: {counts.changes:,} changes = {counts.inserted:,} inserted + "
                         f"{counts.updated:,} updated + {counts.deleted:,} deleted + {counts.superseded:,} superseded")
    assert status[2].startswith("  latest run run-a: ")


def test_a_first_batch_that_only_deletes_writes_into_a_fresh_state_table(cdc):
    """Keys created and deleted within the table's first batch: no winning row, only the index and the deletes."""
    pipeline = cdc()
    stream = change_stream(600, 100, partitions=1)
    gone = {c.order_id for c in stream if c.op == "tombstone"} - set(fold(stream))
    kept = [c for c in stream if c.order_id in gone]
    changes = [replace(c, offset=i) for i, c in enumerate(kept)]  # their own contiguous offsets
    assert changes and not fold(changes)
    ingest(pipeline, changes, [[OffsetRange(pipeline.cfg.source.topic, 0, 0, len(changes))]], "run-d")

    assert_state_is_the_fold(pipeline, changes)
    assert state_counts(pipeline.open_state_table()).changes == len(changes)


def test_unwrapped_events_and_bad_changes_are_quarantined_and_counted(cdc):
    pipeline = cdc()
    good = change_stream(600, 100, partitions=1, wrapped=False)
    n = len(good)
    bad = [Change(0, n, b'{"order_id": 1}', b'{"op": "x", "after": {"order_id": 1}}', 1, "u"),  # unknown op
           Change(0, n + 1, None, None, -1, "tombstone"),  # a tombstone without a key
           Change(0, n + 2, b'{"order_id": 2}', b'{"op": "u", "after": null}', 2, "u"),  # no 'after'
           Change(0, n + 3, b"{}", b'{"op": "c", "after": {"status": "new"}}', -1, "c")]  # key column missing
    changes = good + bad
    ingest(pipeline, changes, batches(changes, pipeline.cfg.source.topic, 250), "run-b")

    quarantine = pipeline.open_tables().quarantine.scan().to_arrow()
    reasons = sorted(quarantine["error"].to_pylist())
    assert len(reasons) == 4, reasons
    assert any("unknown Debezium op 'x'" in r for r in reasons)
    assert any("without a Kafka key" in r for r in reasons)
    assert any("without an 'after' object" in r for r in reasons)
    assert any("order_id" in r for r in reasons)
    proof = assert_state_is_the_fold(pipeline, good)
    assert proof.quarantined == 4 and proof.rows == len(good)


def test_a_backfill_committed_after_the_tail_keeps_the_newer_state(cdc):
    pipeline = cdc()
    changes = change_stream(3000, 400, partitions=2, snapshot=100)
    topic = pipeline.cfg.source.topic
    cutover = {p: e * 3 // 5 for p, e in ends(changes).items()}
    ingest(pipeline, changes, batches(changes, topic, 300, start=cutover), "tail-1")  # the tail first
    deleted_by_tail = {c.order_id for c in changes if c.op == "d" and c.offset >= cutover[c.partition]}
    ingest(pipeline, changes, batches(changes, topic, 300, end=cutover), "backfill-1")  # older changes after

    assert_state_is_the_fold(pipeline, changes)
    still_deleted = deleted_by_tail - set(fold(changes))
    assert still_deleted and not still_deleted & set(state_by_pyiceberg(pipeline))
    assert state_counts(pipeline.open_state_table()).superseded > 0  # older changes lost to newer applied ones


@pytest.mark.parametrize("seed", [7, 11])
def test_batches_committed_in_any_order_and_replayed_leave_the_fold(cdc, seed):
    pipeline = cdc()
    changes = change_stream(3000, 300, partitions=3, snapshot=60)
    plan = batches(changes, pipeline.cfg.source.topic, 250)
    rng = random.Random(seed)
    order = rng.sample(plan, len(plan)) + rng.sample(plan, 3)  # every batch once in a random order, then replays
    committer = pipeline.committer(pipeline.open_tables())
    for b, ranges in enumerate(order):
        commit(pipeline, changes, ranges, f"shuffled-{seed}", b, committer)

    assert_state_is_the_fold(pipeline, changes)
    counts = state_counts(pipeline.open_state_table())  # the replays counted nothing twice
    assert counts.changes == pipeline.open_tables().data.scan().to_arrow().num_rows
    assert counts.inserted + counts.updated + counts.deleted + counts.superseded == counts.changes


@pytest.mark.parametrize("point", ["before-state-merge", "before-state-commit"])
def test_a_failure_between_the_two_commits_is_caught_up_once(cdc, arm_fault, point):
    pipeline = cdc()
    changes = change_stream(2000, 300, partitions=2, snapshot=50)
    plan = batches(changes, pipeline.cfg.source.topic, 250)
    ingest(pipeline, changes, plan[:3], "run-1")
    arm_fault(point, 1)
    with pytest.raises(InjectedFault):
        commit(pipeline, changes, plan[3], "run-1", 3)
    tables = pipeline.open_tables()
    state = pipeline.open_state_table()
    lag = subtract(read_ledger(tables.data).committed, applied_ranges(state))
    assert lag == plan[3]  # the change log has the batch, the state does not
    assert f"{sum(r.size for r in plan[3]):,} offsets behind the change log" in keyed_status(
        tables.data, state, ("order_id",))[0]
    assert not validate(pipeline, all_runs=True).success

    committer = pipeline.committer(pipeline.open_tables())  # the next run: it catches up first
    for b, ranges in enumerate(plan[2:], start=2):  # and replays batches 2 and 3, already committed
        commit(pipeline, changes, ranges, "run-2", b, committer)
    assert_state_is_the_fold(pipeline, changes)
    assert state_counts(pipeline.open_state_table()).changes == len(changes)  # nothing applied twice


def test_a_state_table_that_folds_another_change_log_is_refused(cdc):
    """Two pipelines merging into one state table would each make it the fold of neither: the second is refused."""
    first = cdc()
    with pytest.raises(LakeError) as err:
        cdc(target__table="other_changes")
    assert str(err.value) == (
        "the state table tailfill.orders_state holds the state of the change log tailfill.orders_changes, not of "
        "this pipeline's tailfill.other_changes: give the pipeline a state table of its own (target.state_table)")
    assert first.open_state_table().properties["tailfill.changes"] == "tailfill.orders_changes"
    cdc(target__table="other_changes", target__state_table="other_state")  # a state table of its own


def test_validate_names_a_key_whose_state_was_tampered_with(cdc):
    pipeline = cdc()
    changes = change_stream(800, 120, partitions=1, snapshot=40)
    ingest(pipeline, changes, batches(changes, pipeline.cfg.source.topic, 200), "run-t")
    victim = sorted(fold(changes))[0]
    pipeline.open_state_table().delete(EqualTo("order_id", victim))  # behind Tailfill's back

    proof = validate(pipeline, all_runs=True)
    assert not proof.success
    assert any(f"key [{victim}]: the state holds no row (deleted), the fold of the change log gives the change at"
               in p for p in proof.problems), proof.problems


def test_validate_in_several_buckets_finds_what_one_bucket_finds(cdc, monkeypatch):
    """The fold a bucket at a time (buckets made small to force a dozen) names the same keys, in the same order,
    with the same counts, as the fold in one bucket: table-wide and for a run."""
    pipeline = cdc()
    changes = change_stream(3000, 400, partitions=2, snapshot=100)
    ingest(pipeline, changes, batches(changes, pipeline.cfg.source.topic, 300), "run-b")
    state = pipeline.open_state_table()
    victim, twin = sorted(fold(changes))[:2]
    state.delete(EqualTo("order_id", victim))  # behind Tailfill's back: a key deleted, another given two rows
    state.append(state.scan(row_filter=EqualTo("order_id", twin)).to_arrow())
    buckets: list[int] = []
    spill = keyed_proof.partition
    monkeypatch.setattr(keyed_proof, "partition", lambda rows, n, folder: buckets.append(n) or spill(rows, n, folder))

    def proofs(bucket_rows: int) -> list[tuple[dict, list[str]]]:
        monkeypatch.setattr(keyed_proof, "BUCKET_ROWS", bucket_rows)
        return [(p.state, p.problems) for p in (validate(pipeline, all_runs=True), validate(pipeline, run_id="run-b"))]

    one = proofs(1_000_000)
    assert set(buckets) == {1}
    buckets.clear()
    assert proofs(300) == one
    assert min(buckets) > 10
    (state_check, problems), _ = one
    assert f"key [{twin}]: two rows in the state (partition/offset" in problems[-2]
    assert problems[-1].startswith(f"key [{victim}]: the state holds no row (deleted), the fold of the change log "
                                   "gives the change at")
    assert state_check["differing"] == 2 and state_check["keys_checked"] == len(fold(changes))


def test_a_key_in_two_partitions_stops_without_version_by(cdc):
    pipeline = cdc()
    changes = change_stream(40, 10, partitions=1)
    moved = changes[5]
    stray = Change(1, 0, moved.key, moved.value.replace(b'"op": "c"', b'"op": "u"'), moved.order_id, "u")
    with pytest.raises(ChangeStreamError, match=rf"key \[{moved.order_id}\] has changes in partitions 0 and 1"):
        ingest(pipeline, [*changes, stray], batches([*changes, stray], pipeline.cfg.source.topic, 100), "run-x")


def test_version_by_orders_a_key_whose_changes_span_partitions(cdc):
    pipeline = cdc(target__version_by="cdc_lsn")
    changes = change_stream(1500, 200, partitions=1, snapshot=50)
    # the same changes, dealt round-robin over 3 partitions: only the lsn orders a key's changes now
    spread, moved_to, next_offset = [], {}, [0, 0, 0]
    for i, c in enumerate(changes):
        p = i % 3
        spread.append(Change(p, next_offset[p], c.key, c.value, c.order_id, c.op))
        moved_to[(c.partition, c.offset)] = (p, next_offset[p])
        next_offset[p] += 1
    ingest(pipeline, spread, batches(spread, pipeline.cfg.source.topic, 97), "run-v")

    expected = {k: moved_to[at] for k, at in fold(changes).items()}  # by offset in one partition = by lsn
    assert state_by_pyiceberg(pipeline) == expected
    assert state_by_duckdb(pipeline) == expected
    proof = validate(pipeline, all_runs=True)
    assert proof.success, proof.problems


def test_spark_backfill_committed_after_the_tail_on_the_broker(cdc, broker, spark):
    """The whole way: Debezium JSON on the broker, the tail first (newer changes), then the backfill of history."""
    pipeline = cdc(source__bootstrap_servers=broker.bootstrap_servers, source__partitions=2)
    cfg, topic = pipeline.cfg, pipeline.cfg.source.topic
    changes = change_stream(3000, 300, partitions=2, wrapped=True, snapshot=100)
    half = {p: e // 2 for p, e in ends(changes).items()}
    history = [c for c in changes if c.offset < half[c.partition]]
    produce_changes(broker.bootstrap_servers, topic, history, 2)
    tail(spark, cfg)  # records the cutover at the end of history; nothing after it yet
    produce_changes(broker.bootstrap_servers, topic, [c for c in changes if c.offset >= half[c.partition]], 2)
    assert sum(r.offsets for r in tail(spark, cfg)) == len(changes) - len(history)
    assert sum(r.offsets for r in backfill(spark, cfg)) == len(history)  # older changes, committed after

    assert_state_is_the_fold(pipeline, changes)


def test_maintain_compacts_the_state_with_its_deletes_and_keeps_the_proof(cdc):
    pipeline = cdc(maintenance={"target_file_bytes": 1 << 20, "expire_older_than": "1s", "keep_last": 2,
                                "orphan_min_age": "1s", "schedule": None})
    changes = change_stream(3000, 400, partitions=2, snapshot=100)
    plan = batches(changes, pipeline.cfg.source.topic, 300)
    committer = pipeline.committer(pipeline.open_tables())  # a running pipeline: its index in memory
    for b, ranges in enumerate(plan[:4]):
        commit(pipeline, changes, ranges, "run-m", b, committer)
    state = pipeline.open_state_table()
    assert any(t.delete_files for t in state.scan().plan_files())

    time.sleep(1.5)  # older than the orphan and expiry ages
    upkeep = maintain(pipeline, MaintenanceConfig.model_validate(pipeline.cfg.maintenance.model_dump()))
    compacted = next(t.compaction for t in upkeep.tables if t.table.endswith("orders_state"))
    assert compacted.files_removed >= 4 and compacted.files_added == 1
    state.refresh()
    assert not any(t.delete_files for t in state.scan().plan_files())  # readers apply no deletes now
    assert state_by_pyiceberg(pipeline) == fold([c for c in changes if any(
        r.partition == c.partition and r.start <= c.offset < r.end for rs in plan[:4] for r in rs)])

    for b, ranges in enumerate(plan[4:], start=4):  # the same committer goes on after the compaction
        commit(pipeline, changes, ranges, "run-m", b, committer)
    assert_state_is_the_fold(pipeline, changes)


def avro_cdc(cdc, registry, topic: str, **changes) -> Pipeline:
    """The orders_cdc pipeline on Debezium's Avro converter (values and keys in the wire format) on ``topic``, whose
    subjects must be registered first: the data table takes its columns from the latest value schema."""
    fmt = {"type": "avro", "envelope": "debezium", "key": "registry", "on_incompatible_schema": "quarantine",
           "schema_registry": {"url": registry.url, "attempts": 2, "timeout_seconds": 2}}
    return cdc(format=fmt, source__topic=topic, **changes)


def test_debezium_avro_stream_lands_as_the_fold_of_its_changes(cdc, registry):
    topic = f"cdc-avro-{uuid.uuid4().hex[:8]}"
    changes = avro_changes(change_stream(4000, 600, partitions=3, snapshot=200), registry.url, topic)
    pipeline = avro_cdc(cdc, registry, topic)
    ingest(pipeline, changes, batches(changes, topic, 400), "run-avro")

    assert_state_is_the_fold(pipeline, changes)
    counts = state_counts(pipeline.open_state_table())
    assert counts.changes == len(changes)  # tombstones included: their keys decoded with the key schema
    assert counts.inserted and counts.updated and counts.deleted and counts.superseded
    assert {"order_id", "status", "amount", "updated_at", "cdc_op", "cdc_lsn"} <= set(table_columns(
        pipeline.open_tables().data).names)


def test_spark_avro_backfill_committed_after_the_tail_on_the_broker(cdc, registry, broker, spark):
    """Debezium Avro on the broker through Spark: the tail first (newer changes), then the backfill of history."""
    topic = f"cdc-avro-{uuid.uuid4().hex[:8]}"
    changes = avro_changes(change_stream(3000, 300, partitions=2, snapshot=100), registry.url, topic)
    pipeline = avro_cdc(cdc, registry, topic, source__bootstrap_servers=broker.bootstrap_servers,
                        source__partitions=2)
    cfg = pipeline.cfg
    half = {p: e // 2 for p, e in ends(changes).items()}
    history = [c for c in changes if c.offset < half[c.partition]]
    produce_changes(broker.bootstrap_servers, topic, history, 2)
    tail(spark, cfg)  # records the cutover at the end of history
    produce_changes(broker.bootstrap_servers, topic, [c for c in changes if c.offset >= half[c.partition]], 2)
    assert sum(r.offsets for r in tail(spark, cfg)) == len(changes) - len(history)
    assert sum(r.offsets for r in backfill(spark, cfg)) == len(history)  # older changes, committed after

    assert_state_is_the_fold(pipeline, changes)


def test_a_job_killed_before_the_state_commit_is_caught_up_by_the_next_run(cdc, broker, spark, home, tmp_path):
    """SIGKILL of a spark-submit backfill paused after its change-log commit and the state's files, before the
    state's commit; the next backfill catches the state up and applies nothing twice."""
    pipeline = cdc(source__bootstrap_servers=broker.bootstrap_servers, source__partitions=2, backfill__slices=1,
                   backfill__max_offsets_per_batch=600, backfill__batch_seconds=None)
    cfg = pipeline.cfg
    changes = change_stream(3000, 300, partitions=2, snapshot=100)
    produce_changes(broker.bootstrap_servers, cfg.source.topic, changes, 2)
    flags = Path(os.environ["TAILFILL_FAULT_DIR"])
    marker = uuid.uuid4().hex
    env = submit_env() | {"TAILFILL_HOME": str(home), "TAILFILL_TEST_MARKER": marker,
                          "TAILFILL_FAULT_PAUSE": "before-state-commit", "TAILFILL_FAULT_SKIP": "1"}
    log = tmp_path / "backfill.log"
    proc = subprocess.Popen(spark_submit_command(backfill_spec(pipeline)), env=env, stdout=log.open("w"),
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while not (flags / "before-state-commit").exists():
            assert proc.poll() is None, f"the job ended before the pause:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
    finally:
        kill_job_tree(proc, f"TAILFILL_TEST_MARKER={marker}".encode())
        for name in ("before-state-commit", "before-state-commit.arrivals"):
            (flags / name).unlink(missing_ok=True)
    tables, state = pipeline.open_tables(), pipeline.open_state_table()
    assert subtract(read_ledger(tables.data).committed, applied_ranges(state)), "the kill left the state behind"

    backfill(spark, cfg)

    assert_state_is_the_fold(pipeline, changes)
    assert state_counts(pipeline.open_state_table()).changes == len(changes)  # nothing applied twice


def test_a_merge_that_loses_a_commit_race_is_redone_from_a_fresh_read(cdc):
    """Two writers (a backfill lane and a tail): one writes its files, the other commits meanwhile; the first's
    commit conflicts, and it plans again from the state the other left, applying nothing twice."""
    pipeline = cdc()
    changes = change_stream(2000, 200, partitions=2, snapshot=50)
    plan = batches(changes, pipeline.cfg.source.topic, 250)
    first, second = (pipeline.committer(pipeline.open_tables()) for _ in range(2))
    commit(pipeline, changes, plan[0], "lane-1", 0, first)
    flags = Path(os.environ["TAILFILL_FAULT_DIR"])
    (flags / "pause-before-state-commit").touch()
    slow = threading.Thread(target=commit, args=(pipeline, changes, plan[1], "lane-1", 1, first))
    try:
        slow.start()
        deadline = time.monotonic() + 120
        while not (flags / "before-state-commit").exists():
            assert time.monotonic() < deadline and slow.is_alive(), "the first writer never reached its commit"
            time.sleep(0.1)
        (flags / "pause-before-state-commit").unlink()
        for b, ranges in enumerate(plan[2:], start=2):  # the other writer commits meanwhile
            commit(pipeline, changes, ranges, "tail-1", b, second)
        (flags / "before-state-commit.release").touch()
        slow.join(timeout=120)
        assert not slow.is_alive()
    finally:
        for name in ("pause-before-state-commit", "before-state-commit", "before-state-commit.release",
                     "before-state-commit.arrivals"):
            (flags / name).unlink(missing_ok=True)
    assert_state_is_the_fold(pipeline, changes)
    assert state_counts(pipeline.open_state_table()).changes == len(changes)
