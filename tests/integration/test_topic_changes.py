"""A topic that changes under a pipeline: partitions added while the tail runs, the topic deleted and made again.

Kafka only ever adds partitions (``CreatePartitions``); a new partition starts at offset 0 and is the tail's
from its first offset. A topic deleted and created under the same name starts its offsets again at 0 under a
new topic id (a UUID the broker gives every topic): the table records the ids it read and every plan compares
them, so a recreated topic is refused even when its new offsets have passed the old ones.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from helpers import (
    assert_each_offset_once,
    backfill,
    finished,
    in_background,
    set_dotted,
    stored,
    tables_of,
    tail,
    wait_until,
)

from tailfill import cli
from tailfill.dev.sample import produce_sample
from tailfill.lake.ledger import read_ledger
from tailfill.lake.topic_ids import TOPIC_IDS_PROP
from tailfill.offsets import OffsetRange, merge
from tailfill.pipeline.load import load_pipeline
from tailfill.source.topics import ensure_topic

pytestmark = pytest.mark.integration


def add_partitions(bootstrap: str, topic: str, count: int) -> None:
    """Grow ``topic`` to ``count`` partitions (``CreatePartitions``), as ``kafka-topics.sh --alter`` does."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_partitions([NewPartitions(topic, count)]).values():
        fut.result(timeout=30)


def committed_on(cfg, partition: int) -> list[OffsetRange]:
    data = tables_of(cfg).data
    data.refresh()
    return [r for r in merge(read_ledger(data).committed) if r.partition == partition]


def test_partitions_added_to_a_live_topic_are_tailed_from_their_first_offset(spark, make_pipeline, capsys):
    cfg = make_pipeline(source__partitions=None, tail__trigger="processing_time", tail__trigger_interval_seconds=2,
                        tail__min_offsets_per_batch=100, backfill__slices=1)
    bs, topic = cfg.source.bootstrap_servers, cfg.source.topic
    ensure_topic(bs, topic, 2)
    produce_sample(bs, topic, 400, 2)
    backfill(spark, cfg)  # the cutover: the end of partitions 0 and 1
    thread, out = in_background(tail, spark, cfg, False, 240)
    produce_sample(bs, topic, 100, 2)
    wait_until(lambda: sum(r.size for p in (0, 1) for r in committed_on(cfg, p)) == 500, "the tail's first commit",
               timeout=180)

    add_partitions(bs, topic, 3)
    produce_sample(bs, topic, 300, 3)  # 100 to each partition, the new one too
    wait_until(lambda: committed_on(cfg, 2) == [OffsetRange(topic, 2, 0, 100)] or not thread.is_alive(),
               "the running tail to commit the new partition's offsets [0, 100)", timeout=180)
    capsys.readouterr()
    assert cli.main(["stop-tail", str(cfg.path)]) == 0
    [result] = finished(thread, out)
    per_topic = assert_each_offset_once(cfg, [topic])  # and validate --all passes
    assert per_topic == {topic: 800}
    assert {p for _, p, _ in stored(cfg)} == {0, 1, 2}
    assert (result.offsets, result.restarts) == (400, 0), result  # 100 before the partition came, 300 after


def test_a_pinned_partition_count_stops_the_live_tail_and_the_next_plan_with_one_line(spark, make_pipeline, capsys):
    """``source.partitions: 2`` and a third partition added: the running tail stops at its next plan, the next
    ``tail`` is refused before it starts, each with one line naming the topic, both counts and the fix; nothing of
    the new partition is committed. With the count set to 3 the tail reads the new partition from offset 0."""
    cfg = make_pipeline(source__partitions=2, tail__trigger="processing_time", tail__trigger_interval_seconds=2,
                        backfill__slices=1)
    bs, topic = cfg.source.bootstrap_servers, cfg.source.topic
    produce_sample(bs, topic, 400, 2)
    backfill(spark, cfg)
    thread, out = in_background(tail, spark, cfg, False, 240)
    wait_until(lambda: committed_on(cfg, 0) and tables_of(cfg).data.properties.get("tailfill.cutover") is not None,
               "the tail to start", timeout=120)
    add_partitions(bs, topic, 3)
    produce_sample(bs, topic, 300, 3)
    thread.join(180)
    assert not thread.is_alive(), "the tail did not stop"
    said = f"source.partitions: topic {topic!r} has 3 partitions, the pipeline expects 2 (fix: partitions were added"
    assert said in str(out.get("error")), out
    assert committed_on(cfg, 2) == []

    capsys.readouterr()
    assert cli.main(["tail", str(cfg.path), "--once"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: {cfg.path}: {said}") and "set source.partitions to 3" in line, line

    Path(cfg.path).write_text(yaml.safe_dump(set_dotted(yaml.safe_load(Path(cfg.path).read_text()),
                                                        {"source__partitions": 3})))
    cfg = load_pipeline(cfg.path)
    tail(spark, cfg)
    assert committed_on(cfg, 2) == [OffsetRange(topic, 2, 0, 100)]
    assert assert_each_offset_once(cfg, [topic]) == {topic: 700}


def recreate(bootstrap: str, topic: str, partitions: int) -> None:
    """Delete ``topic`` and create it again under the same name (Kafka gives it a new topic id)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.delete_topics([topic]).values():
        fut.result(timeout=30)
    wait_until(lambda: create_topic(admin, topic, partitions), f"topic {topic} to be created again", timeout=60,
               poll=0.5)


def create_topic(admin: AdminClient, topic: str, partitions: int) -> bool:
    """Create ``topic``; False while the broker still deletes the old one."""
    try:
        for fut in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
            fut.result(timeout=30)
        return True
    except KafkaException as exc:
        if exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return False
        raise


def table_state(cfg) -> tuple:
    """What a plan must not change: the data table's snapshots and properties."""
    data = tables_of(cfg).data
    data.refresh()
    return [s.snapshot_id for s in data.snapshots()], dict(data.properties)


@pytest.mark.parametrize(("partitions", "records"), [(2, 600), (3, 30)], ids=["same-count-more-records",
                                                                          "other-count-fewer-records"])
def test_a_topic_deleted_and_created_again_is_refused_with_one_line(spark, make_pipeline, capsys, partitions,
                                                                     records):
    """The table holds offsets [0, 100) of two partitions; the topic is deleted and made again with ``partitions``
    partitions and ``records`` records: more than before, so the offsets pass the table's (the old checks saw
    nothing wrong), or fewer on more partitions. Every plan (tail, backfill, preflight) refuses it with one line
    naming the topic, both ids, what it holds and the fix; nothing is committed or recorded."""
    cfg = make_pipeline(source__partitions=2, backfill__slices=1)
    bs, topic = cfg.source.bootstrap_servers, cfg.source.topic
    produce_sample(bs, topic, 200, 2)
    backfill(spark, cfg)
    [old_id] = json.loads(table_state(cfg)[1][TOPIC_IDS_PROP]).values()
    recreate(bs, topic, partitions)
    produce_sample(bs, topic, records, partitions)
    before = table_state(cfg)

    capsys.readouterr()
    for command, code in (["tail", "--once"], 2), (["backfill"], 2), (["preflight"], 1):  # 1: its verdict
        assert cli.main([command[0], str(cfg.path), *command[1:]]) == code, command
        captured = capsys.readouterr()
        [line] = [ln for ln in (captured.out + captured.err).splitlines() if "created again" in ln]
        assert f"topic {topic!r} on {bs} was deleted and created again: its topic id is now " in line, line
        assert f"recorded {old_id} (it has {partitions} partitions ending at " in line, line
        assert "the table holds offsets up to 100" in line and f"`tailfill reset {cfg.name}`" in line, line
    assert table_state(cfg) == before


def test_a_table_made_before_topic_ids_were_recorded_records_them_at_its_next_plan(spark, make_pipeline, capsys):
    cfg = make_pipeline(source__partitions=2, backfill__slices=1)
    bs, topic = cfg.source.bootstrap_servers, cfg.source.topic
    produce_sample(bs, topic, 200, 2)
    backfill(spark, cfg)
    data = tables_of(cfg).data
    recorded = data.properties[TOPIC_IDS_PROP]
    with data.transaction() as tx:  # as a table made before ids were recorded
        tx.remove_properties(TOPIC_IDS_PROP)
    produce_sample(bs, topic, 100, 2)
    tail(spark, cfg)  # plans as before, and records the id
    assert table_state(cfg)[1][TOPIC_IDS_PROP] == recorded
    assert assert_each_offset_once(cfg, [topic]) == {topic: 300}

    recreate(bs, topic, 2)
    produce_sample(bs, topic, 400, 2)
    capsys.readouterr()
    assert cli.main(["tail", str(cfg.path), "--once"]) == 2
    assert "was deleted and created again" in capsys.readouterr().err
