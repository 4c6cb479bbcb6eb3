"""Benchmark: the embedded broker's storage engines side by side, produce and consume rates in one run.

For each engine (``memory``, and ``s3`` on the local SeaweedFS that ``tailfill broker up`` starts) on a
fresh home: a bulk produce of N sample events (the sample producer's settings: ``linger.ms=20``), a
bulk read of them (the ingest consumer's settings), then D seconds of live events at R/s
(``linger.ms=5``: small record batches, as a live producer makes) and the time to read those back.
For ``s3`` the broker is then restarted (``broker down``/``up``) and every record is read again.

    .venv/bin/python benchmarks/broker_storage.py [--events 200000] [--rate 600] [--seconds 10]
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from tailfill.config import SourceConfig
from tailfill.dev.broker import broker_down, broker_up
from tailfill.dev.sample import produce_live, produce_sample
from tailfill.source.kafka import consumer_config

PARTITIONS = 4


def read_all(bootstrap: str, topic: str, expected: int, start: dict[int, int] | None = None,
             timeout: float = 300) -> tuple[int, float]:
    """Read ``expected`` records of ``topic`` from ``start`` (default: 0) with the ingest consumer's settings;
    (records read, seconds)."""
    conf = consumer_config(SourceConfig(bootstrap_servers=bootstrap, topic=topic))
    consumer = Consumer(conf)
    consumer.assign([TopicPartition(topic, p, (start or {}).get(p, 0)) for p in range(PARTITIONS)])
    started, n = time.monotonic(), 0
    try:
        while n < expected and time.monotonic() - started < timeout:
            n += sum(1 for m in consumer.consume(10_000, 0.5) if m.error() is None)
    finally:
        consumer.close()
    return n, time.monotonic() - started


def live(bootstrap: str, topic: str, rate: float, seconds: float) -> tuple[int, float]:
    """Produce at ``rate``/s for ``seconds``; (records, seconds until all were acknowledged)."""
    stop = threading.Event()
    timer = threading.Timer(seconds, stop.set)
    timer.start()
    started = time.monotonic()
    sent = produce_live(bootstrap, topic, rate, stop, PARTITIONS)["good"]
    return sent, time.monotonic() - started


def engine(storage: str, events: int, rate: float, seconds: float) -> list[str]:
    home = Path(tempfile.mkdtemp(prefix=f"tailfill-broker-{storage}-"))
    lines: list[str] = []
    started = time.monotonic()
    state = broker_up(home, storage=storage)
    up_s = time.monotonic() - started
    bootstrap = state["bootstrap_servers"]
    try:
        t = time.monotonic()
        produce_sample(bootstrap, "bulk", events, PARTITIONS)
        produce_s = time.monotonic() - t
        n, read_s = read_all(bootstrap, "bulk", events)
        lines.append(f"{storage:>6}: up {up_s:4.1f}s | bulk produce {events / produce_s:>9,.0f} msg/s | "
                     f"bulk read {n / read_s:>9,.0f} msg/s ({n:,}/{events:,})")
        sent, live_s = live(bootstrap, "live", rate, seconds)
        n, read_s = read_all(bootstrap, "live", sent)
        lines.append(f"{'':>6}  live {rate:,.0f}/s for {seconds:g}s: {sent:,} sent, all acknowledged after "
                     f"{live_s:4.1f}s | read back in {read_s:5.1f}s ({n / read_s:,.0f} msg/s, {n:,}/{sent:,})")
        if storage == "s3":
            broker_down(home)
            t = time.monotonic()
            bootstrap = broker_up(home)["bootstrap_servers"]
            restart_s = time.monotonic() - t
            n_bulk, _ = read_all(bootstrap, "bulk", events)
            n_live, _ = read_all(bootstrap, "live", sent)
            lines.append(f"{'':>6}  after down/up ({restart_s:.1f}s, same address {bootstrap}): "
                         f"{n_bulk:,}/{events:,} bulk and {n_live:,}/{sent:,} live records read back")
    finally:
        broker_down(home)
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=200_000, help="bulk events")
    ap.add_argument("--rate", type=float, default=600, help="live events per second")
    ap.add_argument("--seconds", type=float, default=10, help="seconds of live events")
    ap.add_argument("--storage", action="append", choices=("memory", "s3"), help="default: both")
    args = ap.parse_args()
    for storage in args.storage or ("memory", "s3"):
        for line in engine(storage, args.events, args.rate, args.seconds):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
