"""Offsets removed by retention before ingest: fail by default, or record the gap and go on.

The broker is Apache Kafka; the head of a partition is removed as retention removes it, through
``DeleteRecords`` (what ``kafka-delete-records.sh`` and a ``retention.ms`` expiry both do to the log start
offset), so the removed offsets really are gone from the broker when the backfill reads them: before the
backfill starts, or between two of its batches (the first held before its commit by the ``before-commit``
failpoint while the head goes).
"""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Producer
from confluent_kafka import TopicPartition as KTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from helpers import backfill, committed, high_watermarks, in_background, ingested, tables_of, wait_until

from tailfill.cli import main
from tailfill.dev.sample import sample_event
from tailfill.errors import IngestError
from tailfill.lake.batch_summary import SUMMARY_RANGES, SUMMARY_RUN
from tailfill.lake.ledger import batch_summaries, read_ledger
from tailfill.offsets import OffsetRange, TopicPartition, merge, ranges_from_json
from tailfill.pipeline.handle import open_pipeline
from tailfill.proof.validate import validate
from tailfill.source.kafka import consumer_config, watermarks

pytestmark = pytest.mark.integration

RECORDS, LOW = 20, 10


def delete_head(bootstrap: str, topic: str, low: int) -> None:
    """Remove offsets [0, ``low``) of ``topic``'s partition 0 from the broker (``DeleteRecords``)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.delete_records([KTopicPartition(topic, 0, low)]).values():
        assert fut.result(timeout=30).low_watermark == low  # the partition's new log start offset


@pytest.fixture
def produced_pipeline(broker, make_pipeline):
    """A 1-partition topic holding offsets [0, RECORDS)."""

    def make(records: int = RECORDS, **changes):
        cfg = make_pipeline(source__partitions=1, **changes)
        topic = cfg.source.topic
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})  # kept until the futures resolve
        for fut in admin.create_topics([NewTopic(topic, 1, 1)]).values():
            fut.result(timeout=10)
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0})
        for i in range(records):
            producer.produce(topic, value=json.dumps(sample_event("ret", i)).encode(), partition=0)
        assert producer.flush(10) == 0
        return cfg

    return make


@pytest.fixture
def trim(broker):
    """Trim [0, LOW) off a topic made by ``produced_pipeline``, as retention would; the broker then says so."""

    def cut(cfg) -> None:
        delete_head(broker.bootstrap_servers, cfg.source.topic, LOW)
        conf = consumer_config(cfg.source)
        marks = watermarks(conf, [TopicPartition(cfg.source.topic, 0)])
        assert (list(marks.low.offsets.values()), list(marks.high.offsets.values())) == ([LOW], [RECORDS])

    return cut


@pytest.fixture
def trimmed_pipeline(produced_pipeline, trim):
    """A 1-partition topic holding offsets [0, RECORDS) of which [0, LOW) were trimmed away."""

    def make(**changes):
        cfg = produced_pipeline(**changes)
        trim(cfg)
        return cfg

    return make


def backfill_from_zero(spark, cfg):
    topic = cfg.source.topic
    return backfill(spark, cfg, start={topic: {"0": 0}}, end={topic: {"0": RECORDS}}, slices=1)


def test_backfill_below_earliest_fails_naming_the_lost_range(spark, trimmed_pipeline):
    cfg = trimmed_pipeline()
    topic = cfg.source.topic
    assert high_watermarks(cfg) == {0: RECORDS}

    with pytest.raises(IngestError) as err:
        backfill_from_zero(spark, cfg)
    message = str(err.value)
    for part in ("ExpiredOffsetsError", f"{topic}[0]", "[0, 10)", "earliest available is 10"):
        assert part in message, f"{part!r} not in {message!r}"
    table = tables_of(cfg)[0]
    table.refresh()
    assert read_ledger(table).committed == []


def test_record_gap_skips_and_records_the_lost_range(spark, trimmed_pipeline):
    cfg = trimmed_pipeline(source__on_expired_offsets="record_gap")
    topic = cfg.source.topic

    [result] = backfill_from_zero(spark, cfg)
    assert result.rows + result.quarantined == RECORDS - LOW

    table = tables_of(cfg)[0]
    table.refresh()
    ledger = read_ledger(table)
    assert ledger.lost == [OffsetRange(topic, 0, 0, LOW)]
    assert merge(ledger.committed + ledger.lost) == [OffsetRange(topic, 0, 0, RECORDS)]  # no hole left
    rows, bad = ingested(cfg)
    assert sorted((rows + bad).elements()) == [(0, o) for o in range(LOW, RECORDS)]  # each offset once
    assert not bad


def test_replay_of_offsets_trimmed_since_their_backfill_is_refused_before_writing(spark, produced_pipeline, trim,
                                                                                capsys):
    cfg = produced_pipeline()
    backfill_from_zero(spark, cfg)
    trim(cfg)
    data = tables_of(cfg).data
    data.refresh()
    snapshots = len(data.snapshots())
    capsys.readouterr()  # the backfill's progress lines

    assert main(["replay", str(cfg.path)]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: cannot replay topic {cfg.source.topic} partition 0: offset 0 is no longer on ")
    assert f"(earliest available is {LOW}: retention removed [0, {LOW}))" in line and "nothing was written" in line
    data.refresh()
    assert len(data.snapshots()) == snapshots  # nothing committed

    assert main(["replay", str(cfg.path), "--from", json.dumps({cfg.source.topic: {"0": LOW}})]) == 0
    assert f"replayed {RECORDS - LOW} offsets" in capsys.readouterr().out
    rows, bad = ingested(cfg)
    assert sorted((rows + bad).elements()) == [(0, o) for o in range(RECORDS)]  # each offset once, as before


# --- the head goes while the backfill reads it ---------------------------------------------------------

HELD, CAP, CUT = 1_000, 200, 500  # records; each batch's offsets; the head [0, CUT) removed after the first batch


def backfill_losing_its_head(spark, cfg, tmp_path, monkeypatch) -> dict:
    """Run the backfill of ``[0, HELD)`` in batches of CAP, its first batch held before its commit while the
    broker removes ``[0, CUT)``; the batches after it find their offsets gone. Returns the run's outcome
    (``result`` or ``error``)."""
    faults = tmp_path / "faults"
    monkeypatch.setenv("TAILFILL_FAULT_DIR", str(faults))
    monkeypatch.setenv("TAILFILL_FAULT_PAUSE", "before-commit")
    thread, out = in_background(backfill, spark, cfg)
    wait_until(lambda: (faults / "before-commit").exists() or not thread.is_alive(),
               "the first batch to be read and held before its commit", timeout=300)
    assert thread.is_alive(), out
    assert committed(cfg) == 0  # held: [0, CAP) is read, not committed
    delete_head(cfg.source.bootstrap_servers, cfg.source.topic, CUT)
    (faults / "before-commit.release").touch()
    thread.join(600)
    assert not thread.is_alive(), "the backfill did not end"
    monkeypatch.delenv("TAILFILL_FAULT_PAUSE")
    return out


def committed_by_run(cfg) -> dict[str, list[OffsetRange]]:
    """The ranges each run's batch commits name, by run id."""
    out: dict[str, list[OffsetRange]] = {}
    for summary in batch_summaries(tables_of(cfg).data):
        out.setdefault(summary[SUMMARY_RUN], []).extend(ranges_from_json(summary[SUMMARY_RANGES]))
    return {run: merge(ranges) for run, ranges in out.items()}


def held_pipeline(produced_pipeline, **changes):
    return produced_pipeline(HELD, backfill__slices=1, backfill__max_offsets_per_batch=CAP,
                             backfill__batch_seconds=None, **changes)


def test_head_removed_mid_backfill_fails_naming_the_lost_range_and_keeps_what_it_committed(
        spark, produced_pipeline, tmp_path, monkeypatch):
    cfg = held_pipeline(produced_pipeline)
    topic = cfg.source.topic
    out = backfill_losing_its_head(spark, cfg, tmp_path, monkeypatch)

    assert isinstance(out.get("error"), IngestError), out
    message = str(out["error"])
    assert "\n" not in message, message
    for part in ("ExpiredOffsetsError", f"{topic}[0] [{CAP}, {CUT})", f"earliest available is {CUT}", "record_gap"):
        assert part in message, f"{part!r} not in {message!r}"
    ledger = read_ledger(tables_of(cfg).data)
    assert (ledger.committed, ledger.lost) == ([OffsetRange(topic, 0, 0, CAP)], [])  # the held batch, nothing more
    [(run, ranges)] = committed_by_run(cfg).items()
    assert run.startswith("backfill-") and ranges == [OffsetRange(topic, 0, 0, CAP)]
    rows, bad = ingested(cfg)
    assert sorted((rows + bad).elements()) == [(0, o) for o in range(CAP)]


def test_head_removed_mid_backfill_with_record_gap_records_and_names_the_lost_range(
        spark, produced_pipeline, tmp_path, monkeypatch, capsys):
    cfg = held_pipeline(produced_pipeline, source__on_expired_offsets="record_gap")
    topic = cfg.source.topic
    out = backfill_losing_its_head(spark, cfg, tmp_path, monkeypatch)

    [result] = out["result"]
    assert (result.offsets, result.rows + result.quarantined) == (HELD, HELD - (CUT - CAP))
    lost = [OffsetRange(topic, 0, CAP, CUT)]
    ledger = read_ledger(tables_of(cfg).data)
    assert (ledger.committed, ledger.lost) == ([OffsetRange(topic, 0, 0, HELD)], lost)
    assert committed_by_run(cfg) == {result.run_id: [OffsetRange(topic, 0, 0, HELD)]}  # one run, every offset
    rows, bad = ingested(cfg)
    assert sorted((rows + bad).elements()) == [(0, o) for o in [*range(CAP), *range(CUT, HELD)]]  # each once
    proof = validate(open_pipeline(cfg), all_runs=True)
    assert proof.success, proof.problems
    assert proof.lost == [str(lost[0])]
    capsys.readouterr()
    assert main(["validate", str(cfg.path), "--all"]) == 0
    assert main(["status", str(cfg.path)]) == 0
    said = capsys.readouterr().out
    assert f"lost (expired, recorded): {CUT - CAP:,}" in said, said
