"""Offsets removed by retention before ingest: fail by default, or record the gap and go on.

These tests depend on tansu's storage layout, a deviation from Apache Kafka (where DeleteRecords
or retention.ms would trim the partition): tansu's memory engine cannot trim records, so a tansu
broker runs on its s3 engine against the moto server and the test trims a partition by editing
the objects directly — raising ``low`` in the partition's ``watermark.json`` and deleting the
record batches below it (one batch per record, as the producer flushes after each record).
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid

import boto3
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from helpers import backfill, high_watermarks, ingested, tables_of

from tailfill.cli import main
from tailfill.dev.broker import free_port, tansu_binary, wait_for_port
from tailfill.dev.sample import sample_event
from tailfill.errors import IngestError
from tailfill.lake.ledger import read_ledger
from tailfill.offsets import OffsetRange, merge

pytestmark = pytest.mark.integration

RECORDS, LOW = 20, 10
PARTITION_DIR = "clusters/tansu_cluster/topics/{topic}/partitions/0000000000/"


@pytest.fixture(scope="module")
def s3_tansu(s3_endpoint):
    """A tansu broker storing its data in its own bucket on the moto server; yields (bootstrap, s3, bucket)."""
    creds = {"aws_access_key_id": os.environ["AWS_ACCESS_KEY_ID"],
             "aws_secret_access_key": os.environ["AWS_SECRET_ACCESS_KEY"]}
    s3 = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1", **creds)
    bucket = f"tansu-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    env = {**os.environ, "AWS_ENDPOINT": s3_endpoint, "AWS_ALLOW_HTTP": "true", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ACCESS_KEY_ID": creds["aws_access_key_id"], "AWS_SECRET_ACCESS_KEY": creds["aws_secret_access_key"]}
    proc = subprocess.Popen(
        [tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
         "--storage-engine", f"s3://{bucket}/"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, proc)
        yield f"127.0.0.1:{port}", s3, bucket
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
def produced_pipeline(s3_tansu, make_pipeline):
    """A 1-partition topic holding offsets [0, RECORDS), one record batch object per offset."""
    bootstrap, _, _ = s3_tansu

    def make(**changes):
        cfg = make_pipeline(source__bootstrap_servers=bootstrap, source__partitions=1, **changes)
        topic = cfg.source.topic
        admin = AdminClient({"bootstrap.servers": bootstrap})  # keep a reference until the futures resolve
        for fut in admin.create_topics([NewTopic(topic, 1, 1)]).values():
            fut.result(timeout=10)
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "enable.idempotence": False})
        for i in range(RECORDS):  # a flush per record: each offset is its own batch object
            producer.produce(topic, value=json.dumps(sample_event("ret", i)).encode(), partition=0)
            assert producer.flush(10) == 0
        return cfg

    return make


@pytest.fixture
def trim(s3_tansu):
    """Trim [0, LOW) off a topic made by ``produced_pipeline``, as retention would."""
    _, s3, bucket = s3_tansu

    def cut(cfg) -> None:
        prefix = PARTITION_DIR.format(topic=cfg.source.topic)
        batches = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=prefix + "records/")["Contents"]]
        assert batches == [f"{prefix}records/{i:020d}.batch" for i in range(RECORDS)]
        mark = json.loads(s3.get_object(Bucket=bucket, Key=prefix + "watermark.json")["Body"].read())
        assert mark["high"] == RECORDS
        s3.put_object(Bucket=bucket, Key=prefix + "watermark.json", Body=json.dumps({**mark, "low": LOW}).encode())
        s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in batches[:LOW]]})

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
