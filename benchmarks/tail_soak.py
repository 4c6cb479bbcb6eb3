"""Benchmark: a live processing-time tail kept running for many minutes, its commit gaps and freshness.

On the embedded broker, a producer writes live events in small batches at each rate, and ``tailfill tail``
(trigger 10 s, its own ``spark-submit``) runs for ``--minutes`` after its first commit, alone or (``--beside``)
beside a ``tailfill backfill --max-rate`` of 400,000 offsets of history that lasts most of the run. Each row
is measured from the tail run's batch reports: commits, gaps between them (p50, p99, max, and max as a
multiple of the interval), the batches' produce-to-commit latency, restarts and exit code.

The baseline, in the same run: a bare confluent-kafka consumer reading the same topic live beside each tail,
its produce-to-read latency (receive time minus the record's timestamp): the freshness nothing that writes a
table can beat.

    .venv/bin/python benchmarks/tail_soak.py [--minutes 30] [--rates 600,2000] [--beside]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
HISTORY = 400_000
INTERVAL = 10


def pipeline(home: Path, bootstrap: str, name: str, consumer: dict) -> Path:
    """The demo pipeline on a topic of its own, as a processing-time tail (trigger 10 s)."""
    spec = yaml.safe_load((REPO / "pipelines" / "demo.yaml").read_text())
    spec["name"] = name
    spec["source"].update(bootstrap_servers=bootstrap, topic=f"soak-{uuid.uuid4().hex[:8]}", consumer=consumer)
    spec["tail"].update(trigger="processing_time", trigger_interval_seconds=INTERVAL, freshness_seconds=3 * INTERVAL,
                        min_offsets_per_batch=500, max_offsets_per_batch=100_000)
    path = home / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


class LiveLatency(threading.Thread):
    """A bare consumer reading ``topic`` live from its end: each record's receive time minus its timestamp."""

    def __init__(self, bootstrap: str, topic: str):
        super().__init__(name="live-latency", daemon=True)
        self.bootstrap, self.topic = bootstrap, topic
        self.latencies: list[float] = []
        self.stop = threading.Event()

    def run(self) -> None:
        from confluent_kafka import OFFSET_END, Consumer
        from confluent_kafka import TopicPartition as KTopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "soak-baseline",
                             "enable.auto.commit": False, "isolation.level": "read_committed"})
        parts = consumer.list_topics(self.topic, timeout=10).topics[self.topic].partitions
        consumer.assign([KTopicPartition(self.topic, p, OFFSET_END) for p in parts])
        try:
            while not self.stop.is_set():
                for m in consumer.consume(1000, 0.5):
                    if m.error() is None:
                        self.latencies.append(time.time() - m.timestamp()[1] / 1000)
        finally:
            consumer.close()

    def asstr(self) -> str:
        if not self.latencies:
            return "no records read"
        q = statistics.quantiles(self.latencies, n=100)
        return (f"{len(self.latencies):,} records read live: produce-to-read p50 {q[49]:.2f}s p95 {q[94]:.2f}s "
                f"max {max(self.latencies):.2f}s")


def one(home: Path, bootstrap: str, name: str, consumer: dict, minutes: float, rate: float, beside: bool):
    from tailfill.dev.sample import produce_sample
    from tailfill.dev.soak import beside_rate, soak
    from tailfill.pipeline.handle import open_pipeline
    from tailfill.pipeline.load import load_pipeline
    from tailfill.run.contract import new_run_id
    from tailfill.run.planner import TailRequest, plan_tail

    cfg = load_pipeline(pipeline(home, bootstrap, name, consumer))
    produce_sample(bootstrap, cfg.source.topic, HISTORY if beside else 1_000, 4, bad_every=1_001)
    with open_pipeline(cfg) as p:
        plan_tail(p, TailRequest(False, None), new_run_id("tail"))  # records the cutover: history is the backfill's
    logs = home / name
    logs.mkdir()
    rate_limit = beside_rate(HISTORY, minutes * 60) if beside else None
    baseline = LiveLatency(bootstrap, cfg.source.topic)
    baseline.start()
    try:
        result = soak(cfg, minutes * 60, rate, logs, {**os.environ, "TAILFILL_HOME": str(home)},
                      backfill_rate=rate_limit)
    finally:
        baseline.stop.set()
        baseline.join(timeout=30)
    return result, baseline


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=30, help="each tail's length after its first commit")
    ap.add_argument("--rates", default="600,2000", help="live events per second, comma-separated")
    ap.add_argument("--beside", action="store_true", help="run a rate-limited backfill beside each tail")
    args = ap.parse_args()

    from tailfill.dev.broker import EmbeddedBroker

    home = Path(tempfile.mkdtemp(prefix="tailfill-soak-"))
    os.environ["TAILFILL_HOME"] = str(home)
    rows = []
    with EmbeddedBroker() as broker:
        for i, rate in enumerate(float(r) for r in args.rates.split(",")):
            print(f"tailfill: {rate:,.0f}/s for {args.minutes:g} min ...", flush=True)
            result, baseline = one(home, broker.bootstrap_servers, f"today{i}", {}, args.minutes, rate, args.beside)
            rows.append((result, baseline))
            print(f"  tail:     {result.asstr()}\n  baseline: {baseline.asstr()}", flush=True)
    print(f"\ntrigger {INTERVAL}s, objective: no gap over {3 * INTERVAL}s; {os.cpu_count()} cores; logs in {home}")
    for result, baseline in rows:
        print(f"  tailfill  {result.asstr()}\n  baseline  {baseline.asstr()} (a bare consumer of the same topic)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
