"""Evidence: a shared consumer that pauses and resumes partitions can stop reading one for good.

Spark reuses its Python workers, so one consumer reads every batch a worker gets. A reader that
``pause()``s each partition it finished and, on its next batch, calls ``assign()`` then ``resume()``
can lose the assignment's fetch start to the resume under CPU load (both bump the partition's op
version: confluentinc/librdkafka#5591, #2190): that partition's position stays invalid, it never
fetches, and the batch waits out its idle timeout (60 s). The broker is fine meanwhile: the other
partitions of the same consumer, and a fresh assignment, read at once.

This script runs Tailfill's reader over the same ranges again and again on one shared consumer
beside CPU-bound processes, once with the pause/resume pattern (a consumer that resumes right after
each assign and pauses a finished partition) and once as it is (a finished partition leaves the
assignment with ``incremental_unassign``; nothing is paused), and prints how many reads stalled.

    .venv/bin/python benchmarks/reader_stall.py [--reads 600] [--burners 3] [--idle 6]
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import time

from confluent_kafka import Consumer

from tailfill.dev.broker import EmbeddedBroker
from tailfill.dev.sample import produce_sample
from tailfill.errors import SourceError
from tailfill.offsets import OffsetRange
from tailfill.source.kafka import OwnedConsumer, read_ranges

TOPIC, PARTITIONS, PER_PARTITION, SLICE = "stall", 4, 2_000, 500


def _burn() -> None:
    while True:
        pass


class PausingConsumer(Consumer):
    """The pause/resume pattern on Tailfill's own reader: ``resume()`` right after ``assign()``, a finished
    partition paused rather than unassigned."""

    def assign(self, partitions: list) -> None:
        super().assign(partitions)
        super().resume(partitions)

    def incremental_unassign(self, partitions: list) -> None:
        self.pause(partitions)


class OwnedPausing(OwnedConsumer):
    """Tailfill's owned consumer, made a :class:`PausingConsumer`."""

    def get(self) -> Consumer:
        if self._consumer is None:
            self._consumer = PausingConsumer(self.conf)
        return self._consumer


def stalled_read(conf: dict, consumer: OwnedConsumer, ranges: list[OffsetRange], idle_s: float) -> bool:
    """One batch's read on the shared ``consumer`` (replaced by its owner after a failed read, as the executors'
    is). True when it stalled."""
    try:
        rows = sum(b.num_rows for b in read_ranges(conf, ranges, idle_timeout_s=idle_s, consumer=consumer,
                                                   with_markers=False))
    except SourceError:
        return True
    assert rows == SLICE * len(ranges), rows
    return False


def trial(name: str, conf: dict, reads: int, idle_s: float, seed: int) -> str:
    rnd = random.Random(seed)
    kind = OwnedPausing if name == "pause/resume" else OwnedConsumer
    consumer, stalls, started = kind(conf), 0, time.monotonic()
    for _ in range(reads):
        start = rnd.choice(range(0, PER_PARTITION, SLICE))
        ranges = [OffsetRange(TOPIC, p, start, start + SLICE) for p in range(PARTITIONS)]
        stalls += stalled_read(conf, consumer, ranges, idle_s)
        time.sleep(rnd.random() / 2)
    consumer.close()
    return f"{name:>14}: {stalls:3d} of {reads} reads stalled (> {idle_s:g}s without a record)  " \
           f"[{time.monotonic() - started:5.0f}s]"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reads", type=int, default=600)
    ap.add_argument("--burners", type=int, default=3, help="CPU-bound processes beside the reads")
    ap.add_argument("--idle", type=float, default=6.0, help="seconds without a record that count as a stall")
    args = ap.parse_args()
    burners = [multiprocessing.Process(target=_burn, daemon=True) for _ in range(args.burners)]
    for b in burners:
        b.start()
    try:
        with EmbeddedBroker() as broker:
            produce_sample(broker.bootstrap_servers, TOPIC, PARTITIONS * PER_PARTITION, PARTITIONS)
            conf = {"bootstrap.servers": broker.bootstrap_servers, "group.id": "stall", "enable.auto.commit": False,
                    "auto.offset.reset": "error", "enable.partition.eof": False, "queued.min.messages": 1000000,
                    "log.connection.close": False}
            for name in ("pause/resume", "tailfill"):
                print(trial(name, conf, args.reads, args.idle, seed=7), flush=True)
    finally:
        for b in burners:
            b.terminate()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
