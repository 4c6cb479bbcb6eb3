"""A Kafka cluster fails over under a backfill and a live tail.

Three KRaft nodes on loopback (each broker and controller), the topic replicated three times with
``min.insync.replicas=2``, a producer writing all along with ``acks=all`` and idempotence. One node is SIGKILLed
while the backfill reads and brought back; another while a processing-time tail runs, and brought back. Every
offset the producer had acknowledged must be in the table exactly once, the tail must keep committing, and the
proof must hold. How long each run took to commit again after its kill is printed, not asserted.
"""

from __future__ import annotations

import json
import threading
import time

import pytest
from confluent_kafka import Producer
from helpers import assert_each_offset_once, committed, finished, in_background, tables_of, tail_spec, wait_until

from tailfill import cli
from tailfill.dev.broker import KafkaCluster
from tailfill.dev.sample import sample_event
from tailfill.pipeline.handle import open_pipeline
from tailfill.run.planner import backfill_spec
from tailfill.run.spark_job import run
from tailfill.source.topics import ensure_topic
from tailfill.state.store import StateStore, run_reports

pytestmark = pytest.mark.integration

PARTITIONS, RATE = 3, 200  # records a second, all along
REPLICATED = {"default.replication.factor": "3", "min.insync.replicas": "2", "offsets.topic.replication.factor": "3",
              "transaction.state.log.replication.factor": "3", "transaction.state.log.min.isr": "2",
              "group.initial.rebalance.delay.ms": "0"}


class SteadyProducer:
    """Sample events at :data:`RATE` a second, round-robin over the partitions, ``acks=all`` and idempotent, in a
    thread; ``acked`` holds, by event id, the (partition, offset) of every record the cluster acknowledged (the
    offset is None when the acknowledgement carries none: a retried batch the broker had already written, after a
    failover, is acknowledged as a duplicate, without its offset)."""

    def __init__(self, bootstrap: str, topic: str):
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 5, "delivery.timeout.ms": 120_000})
        self.topic, self.failed = topic, []
        self.acked: dict[str, tuple[int, int | None]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="steady-producer", daemon=True)

    def __enter__(self) -> SteadyProducer:
        self._thread.start()
        return self

    def _delivered(self, err, msg) -> None:
        if err is not None:
            self.failed.append(str(err))
        else:
            self.acked[json.loads(msg.value())["event_id"]] = (msg.partition(), msg.offset())

    def _run(self) -> None:
        i, began = 0, time.monotonic()
        while not self._stop.is_set():
            if i < (time.monotonic() - began) * RATE:
                self.producer.produce(self.topic, json.dumps(sample_event("failover", i)).encode(),
                                      partition=i % PARTITIONS, on_delivery=self._delivered)
                i += 1
                self.producer.poll(0)
            else:
                self.producer.poll(0.01)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)
        assert self.producer.flush(150) == 0, "records still unacknowledged"


def stored_events(cfg) -> dict[str, tuple[int, int]]:
    """(partition, offset) of every row of the data table by its event id; an id stored twice fails."""
    table = tables_of(cfg).data
    table.refresh()
    arrow = table.scan(selected_fields=("event_id", "kafka_partition", "kafka_offset")).to_arrow()
    out: dict[str, tuple[int, int]] = {}
    for event, p, o in zip(*(arrow[c].to_pylist() for c in ("event_id", "kafka_partition", "kafka_offset")),
                           strict=True):
        assert event not in out, f"{event} stored twice: at {out[event]} and {(p, o)}"
        out[event] = (p, o)
    return out


def recovery(cfg, run_id: str, killed_at: float, timeout: float = 240) -> tuple[float, float]:
    """Seconds from the kill to the run's next commit, and to its first commit of a batch begun after the kill."""
    def after() -> list:
        return [b for b in run_reports(StateStore.of(cfg), run_id) if b.at > killed_at]

    wait_until(lambda: any(b.at - b.seconds >= killed_at for b in after()), "a batch begun after the kill to commit",
               timeout=timeout, poll=0.1)
    batches = after()
    return (min(b.at for b in batches) - killed_at,
            min(b.at for b in batches if b.at - b.seconds >= killed_at) - killed_at)


def test_a_cluster_node_killed_mid_backfill_and_another_mid_tail(spark, make_pipeline):
    with KafkaCluster(3, settings=REPLICATED) as cluster:
        bs = cluster.bootstrap_servers
        cfg = make_pipeline(source__bootstrap_servers=bs, source__partitions=PARTITIONS, backfill__slices=1,
                            backfill__max_offsets_per_batch=500, backfill__batch_seconds=None,
                            backfill__max_offsets_per_second=600, backfill__max_consecutive_failures=4,
                            tail__trigger="processing_time", tail__trigger_interval_seconds=2,
                            tail__min_offsets_per_batch=500, tail__max_consecutive_failures=4)
        topic = cfg.source.topic
        ensure_topic(bs, topic, PARTITIONS)
        with SteadyProducer(bs, topic) as producer:
            wait_until(lambda: len(producer.acked) >= 4_000, "4,000 acknowledged records of history", timeout=120)
            spec = backfill_spec(open_pipeline(cfg))  # the cutover: where the tail takes over
            assert spec is not None
            thread, out = in_background(run, spec, spark)
            wait_until(lambda: committed(cfg) >= 1_000, "the backfill's first commits", timeout=180)
            killed_at = time.time()
            cluster.kill(2)
            backfill_recovery = recovery(cfg, spec.run_id, killed_at)
            cluster.start(2)
            [backfilled] = finished(thread, out)

            live = tail_spec(cfg, once=False, stop_after=240)
            thread, out = in_background(run, live, spark)
            wait_until(lambda: run_reports(StateStore.of(cfg), live.run_id), "the tail's first commit", timeout=180)
            time.sleep(4)  # a few batches of the live tail
            killed_at = time.time()
            cluster.kill(3)
            tail_recovery = recovery(cfg, live.run_id, killed_at)
            cluster.start(3)
            time.sleep(6)  # the tail goes on with every node back
        acked = producer.acked
        wait_until(lambda: committed(cfg) >= len(acked) or not thread.is_alive(), "the tail to catch up", timeout=180)
        assert cli.main(["stop-tail", str(cfg.path)]) == 0
        [tailed] = finished(thread, out)

        assert not producer.failed, producer.failed[:5]
        assert assert_each_offset_once(cfg, [topic]) == {topic: len(acked)}  # validate --all too
        rows = stored_events(cfg)  # every acknowledged event stored once, where the cluster said it put it
        assert len(rows) == len(acked) and rows.keys() == acked.keys(), (len(rows), len(acked))
        assert all(o is None or rows[e] == (p, o) for e, (p, o) in acked.items())
        assert tailed.batches >= 4
        print(f"\nfailover: {len(acked):,} records acknowledged (acks=all, idempotent) at {RATE}/s; "
              f"backfill {backfilled.offsets:,} offsets, {backfilled.restarts} restart(s); "
              f"tail {tailed.offsets:,} offsets in {tailed.batches} batches, {tailed.restarts} restart(s)")
        for what, (first, fresh) in (("node 2 SIGKILLed mid-backfill", backfill_recovery),
                                     ("node 3 SIGKILLed mid-tail", tail_recovery)):
            print(f"failover: {what}: next commit {first:.1f} s after the kill, first batch begun after it committed "
                  f"{fresh:.1f} s after")
        for what, result in (("backfill", backfilled), ("tail", tailed)):
            print(f"failover: {what} restart causes: {result.causes}")

