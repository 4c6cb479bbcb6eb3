"""Benchmark: the embedded broker (Apache Kafka, `tailfill broker up`) as a newcomer gets it.

In a fresh home: the first `broker up` (its log folder formatted), its memory, a plain confluent-kafka producer
writing ``--events`` sample-sized JSON records over 4 partitions (linger 20 ms), a tuned consume-only reader
reading all of them from offset 0, `broker down`, `broker up` again (the same log), the same read again, and the
broker's memory at the end.

    .venv/bin/python benchmarks/embedded_broker.py [--events 1000000]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

PARTITIONS = 4
TOPIC = "bench"


def rss_mb(pid: int) -> float:
    """The resident memory of process ``pid``, in MB (Linux's /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def produce(bootstrap: str, count: int) -> float:
    """Seconds to write ``count`` JSON records of about 120 bytes, acknowledged by the broker."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)]).values():
        fut.result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10_000,
                         "queue.buffering.max.messages": 500_000})
    started = time.monotonic()
    for i in range(count):
        value = json.dumps({"id": i, "user": f"user-{i % 1000}", "kind": "click", "amount": i % 997,
                            "ts": "2026-11-29T10:00:00Z", "note": "x" * 30}).encode()
        while True:
            try:
                producer.produce(TOPIC, value=value, key=str(i).encode(), partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120) != 0:
        raise SystemExit("records were not acknowledged within 120 s")
    return time.monotonic() - started


def consume_all(bootstrap: str, count: int) -> float:
    """Seconds for one tuned consumer to read ``count`` records from offset 0 of every partition."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                         "queued.min.messages": 1_000_000, "fetch.max.bytes": 52_428_800})
    consumer.assign([KTopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    started, got = time.monotonic(), 0
    try:
        while got < count:
            got += sum(1 for m in consumer.consume(10_000, 1.0) if m.error() is None)
            if time.monotonic() - started > 600:
                raise SystemExit(f"read {got:,} of {count:,} records in 600 s")
    finally:
        consumer.close()
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    args = parser.parse_args()
    from tailfill.dev.broker import broker_down, broker_up

    with tempfile.TemporaryDirectory(prefix="tailfill-broker-bench-") as tmp:
        home = Path(tmp) / "home"
        try:
            started = time.monotonic()
            state = broker_up(home)
            first_up = time.monotonic() - started
            idle = rss_mb(state["pid"])
            bootstrap = state["bootstrap_servers"]
            wrote = produce(bootstrap, args.events)
            read = consume_all(bootstrap, args.events)
            busy = rss_mb(state["pid"])
            started = time.monotonic()
            broker_down(home)
            down = time.monotonic() - started
            started = time.monotonic()
            state = broker_up(home)
            again_up = time.monotonic() - started
            reread = consume_all(state["bootstrap_servers"], args.events)
            end_rss = rss_mb(state["pid"])
        finally:
            broker_down(home)
    n = args.events
    print(f"embedded broker (Apache Kafka), {n:,} records of ~120 B over {PARTITIONS} partitions")
    print(f"{'step':<44}{'seconds':>9}{'records/s':>12}")
    for step, secs, rate in [("first broker up (log folder formatted)", first_up, None),
                             ("produce (linger 20 ms, acknowledged)", wrote, n / wrote),
                             ("consume-only read from offset 0", read, n / read),
                             ("broker down (clean shutdown)", down, None),
                             ("broker up again (same log)", again_up, None),
                             ("consume-only read after down/up", reread, n / reread)]:
        print(f"{step:<44}{secs:>9.2f}{'' if rate is None else f'{rate:,.0f}':>12}")
    print(f"broker memory (RSS): {idle:.0f} MB idle after up, {busy:.0f} MB after the read, "
          f"{end_rss:.0f} MB after the restart and read")


if __name__ == "__main__":
    main()
