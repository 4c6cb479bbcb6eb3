"""Progress within a batch: what its tasks have read, counted apart from what is committed, never mixed with
another attempt's or another run's counts, never more than the plan leaves."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow as pa

from tailfill.offsets import OffsetRange, PartitionOffsets, TopicPartition
from tailfill.run import connect_batch
from tailfill.run.plan import IngestRequest
from tailfill.run.poll import progress_line
from tailfill.run.query_state import QueryState, Tally
from tailfill.source.read_counts import BatchReads, InBatch, ReadCounter, merged
from tailfill.values.schema import RAW_SCHEMA, RangeMarker

TP = TopicPartition("t", 0)


def records(n: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([{"kafka_topic": "t", "kafka_partition": 0, "kafka_offset": i,
                                        "kafka_value": b"{}"} for i in range(n)], schema=RAW_SCHEMA)


def backfill(end: int) -> IngestRequest:
    return IngestRequest(label="p backfill", start=PartitionOffsets({TP: 0}), end=PartitionOffsets({TP: end}),
                         max_offsets_per_batch=end, max_consecutive_failures=1, restart_backoff_seconds=1,
                         checkpoint=Path("/nowhere/x"), run_id="r")


def test_a_tasks_count_never_passes_what_it_was_given_and_junk_counts_nothing():
    assert merged(["41200 100000", "900 500", "not a count", ""]) == 41_200 + 500


def test_a_task_counts_its_records_not_its_markers_and_writes_at_most_once_a_second(tmp_path):
    now = [100.0]
    path = tmp_path / "c"
    counter = ReadCounter(path, planned=100_000, clock=lambda: now[0])
    batches = counter.counted(iter([records(3), records(4), RangeMarker(OffsetRange("t", 0, 0, 7), 7).to_batch()]))
    next(batches)
    assert path.read_text() == "3 100000"  # the first records are said at once
    next(batches)
    assert counter.read == 7 and path.read_text() == "3 100000"  # not a second later yet
    now[0] += 1.0
    list(batches)
    assert path.read_text() == "7 100000"  # the marker counts nothing; the task's end writes the last count


def test_a_full_disk_stops_the_count_not_the_task(tmp_path, monkeypatch, capsys):
    from tailfill.errors import DiskFullError
    from tailfill.source import read_counts

    def full(path, text):
        raise DiskFullError(f"the disk is full: could not write a read count {path}")

    monkeypatch.setattr(read_counts, "write_whole", full)
    counter = ReadCounter(tmp_path / "c", planned=100, clock=time.monotonic)
    assert [len(b) for b in counter.counted(iter([records(3), records(4)]))] == [3, 4]  # every record passes on
    assert counter.read == 7
    assert "progress within the batch is not shown: cannot write" in capsys.readouterr().err


def test_the_driver_sums_its_own_attempts_counters_only_and_clears_them(tmp_path):
    batch = BatchReads.start(tmp_path, "run-1", 0)
    replayed = BatchReads.start(tmp_path, "run-1", 0)  # the same batch replayed: an attempt of its own
    other_run = BatchReads(tmp_path, "run-2", 0, batch.attempt)
    ranges = [OffsetRange("t", 0, 0, 60_000), OffsetRange("t", 1, 0, 40_000)]
    for reads, ranges_of_task, n in ((batch, ranges[:1], 30_000), (batch, ranges[1:], 10_000),
                                     (replayed, ranges[:1], 55_000)):
        counter = reads.counter(ranges_of_task)
        counter.add(n)
    other_run.counter(ranges[:1]).add(59_000)
    assert batch.now() == InBatch(0, 40_000) and replayed.now() == InBatch(0, 55_000)
    batch.clear()
    assert batch.now() == InBatch(0, 0) and replayed.now() == InBatch(0, 55_000)
    assert BatchReads.start(tmp_path / "never-made", "run-1", 1).now() == InBatch(1, 0)


def test_the_line_says_what_is_committed_and_what_the_batch_in_flight_has_read_apart():
    started = time.monotonic() - 1
    line = progress_line(backfill(100_000), Tally(), started, reading=InBatch(0, 41_200))
    assert "[p backfill] 0/100,000 offsets (0%) committed, 41,200 read in batch 0;" in line, line
    assert "0 batches" in line
    assert progress_line(backfill(100_000), Tally(), started, reading=InBatch(0, 0)) == \
        progress_line(backfill(100_000), Tally(), started)  # nothing read yet: nothing to say
    done = Tally(batches=1, offsets=90_000, rows=90_000)
    line = progress_line(backfill(100_000), done, started, reading=InBatch(1, 25_000))
    assert "90,000/100,000 offsets (90%) committed, 10,000 read in batch 1;" in line, line  # never past the plan


def test_the_state_shows_the_batch_read_where_its_handler_runs_else_what_the_server_published(tmp_path):
    state = QueryState(Tally())
    assert state.in_batch() is None
    state.published = InBatch(3, 12)
    assert state.in_batch() == InBatch(3, 12)
    state.reads = BatchReads.start(tmp_path, "r", 4)
    state.reads.counter([OffsetRange("t", 0, 0, 10)]).add(5)
    assert state.in_batch() == InBatch(4, 5)


class Conf:
    def __init__(self):
        self.values: dict[str, str] = {}
        self.order: list[str] = []

    def get(self, key, default=None):
        return self.values.get(key, default)

    def set(self, key, value):
        self.values[key] = value
        self.order.append(key)

    def unset(self, key):
        self.values.pop(key, None)


class Pacer:
    def __init__(self, note: str = ""):
        self.said = note

    def note(self) -> str:
        return self.said


def test_over_connect_the_client_shows_the_governor_state_of_the_servers_pacer():
    req = type("Req", (), {"run_id": "backfill-1", "name": "backfill", "label": "backfill"})()
    spark = type("Spark", (), {"conf": Conf()})()
    batch = connect_batch.RemoteBatch(req, "{}", 2, "/budget")
    pacer = Pacer("rate-limited to 5/s")
    handler = type("Handler", (), {"state": QueryState(Tally()), "pacer": pacer})()
    state = QueryState(Tally())
    remote = connect_batch.RemoteQuery(spark, req, type("Reports", (), {"read": lambda self: []})(), state)
    remote.sync()
    assert state.note is None  # nothing published yet: the client's own pacer speaks for the server's
    batch._publish(spark, handler, None)  # a batch ended
    remote.sync()
    assert state.note == "rate-limited to 5/s"
    pacer.said = "paused for the tail (tail freshness p95 40s > objective 10s)"

    class Watched(QueryState):  # one round of the watch, while the pacer waits between batches
        def in_batch(self):
            self.stopping.set()
            return None

    batch._watch(spark, Watched(Tally()), pacer)
    remote.sync()
    assert state.note == pacer.said


def test_over_connect_a_query_that_ended_leaves_none_of_its_settings_in_the_shared_session():
    req = type("Req", (), {"run_id": "backfill-1", "name": "backfill", "label": "backfill"})()
    spark = type("Spark", (), {"conf": Conf()})()
    batch = connect_batch.RemoteBatch(req, "{}", 2, "/budget")
    handler = type("Handler", (), {"state": QueryState(Tally()), "pacer": Pacer("rate-limited to 5/s")})()
    remote = connect_batch.RemoteQuery(spark, req, type("Reports", (), {"read": lambda self: []})(),
                                       QueryState(Tally()))
    remote.sync()
    batch._publish_reading(spark, InBatch(0, 10))
    batch._publish(spark, handler, None)
    remote.ask_stop()
    assert spark.conf.values
    remote.close()
    assert spark.conf.values == {}


def test_over_connect_the_client_sees_the_batch_read_and_never_alongside_its_commit():
    req = type("Req", (), {"run_id": "backfill-1", "name": "backfill", "label": "backfill"})()
    spark = type("Spark", (), {"conf": Conf()})()
    batch = connect_batch.RemoteBatch(req, "{}", 2, "/budget")
    handler = type("Handler", (), {"state": QueryState(Tally()), "pacer": Pacer()})()
    state = QueryState(Tally())
    remote = connect_batch.RemoteQuery(spark, req, type("Reports", (), {"read": lambda self: []})(), state)
    batch._publish_reading(spark, InBatch(0, 41_200))
    remote.sync()
    assert state.in_batch() == InBatch(0, 41_200)
    batch._publish(spark, handler, None)  # the batch ended: its reading goes before its record comes
    keys = spark.conf.order
    assert keys.index(connect_batch.reading_key(req), 1) < keys.index(connect_batch.record_key(req))
    remote.sync()
    assert state.in_batch() is None and json.loads(spark.conf.values[connect_batch.record_key(req)])["step"]


def test_over_connect_a_reading_taken_just_before_the_batch_ended_is_not_published_after_its_record():
    # the server's watch thread takes the batch's reading; the batch ends (its record published) before the watch
    # publishes that reading: the client must not see the committed batch as still in flight beside its commit
    import threading

    req = type("Req", (), {"run_id": "backfill-1", "name": "backfill", "label": "backfill"})()
    spark = type("Spark", (), {"conf": Conf()})()
    batch = connect_batch.RemoteBatch(req, "{}", 2, "/budget")
    handler = type("Handler", (), {"state": QueryState(Tally()), "pacer": Pacer()})()
    ended = threading.Thread(target=batch._publish, args=(spark, handler, None))

    class Watched(QueryState):
        def in_batch(self):
            ended.start()  # the batch ends now, while the watch holds its reading
            ended.join(0.5)
            self.stopping.set()  # one round of the watch
            return InBatch(0, 41_200)

    batch._watch(spark, Watched(Tally()), Pacer())
    ended.join()
    assert json.loads(spark.conf.values[connect_batch.record_key(req)])["step"]
    assert not spark.conf.values.get(connect_batch.reading_key(req))


def test_tasks_of_two_topics_starting_at_the_same_partition_and_offset_are_both_counted(tmp_path):
    batch = BatchReads.start(tmp_path, "run-1", 0)
    batch.counter([OffsetRange("orders", 0, 0, 50_000)]).add(30_000)
    batch.counter([OffsetRange("payments", 0, 0, 50_000)]).add(20_000)
    assert batch.now() == InBatch(0, 50_000)
