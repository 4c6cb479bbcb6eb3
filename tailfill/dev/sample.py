"""A sample producer: N JSON events with unique ids, optionally with deliberately bad records."""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from types import EllipsisType

from confluent_kafka import Producer

from tailfill.errors import SourceError
from tailfill.source.kafka_log import logged
from tailfill.source.topics import ensure_topic

KINDS = ("view", "click", "purchase", "refund")
# One of each kind of bad record the quarantine must catch.
BAD_VALUES: tuple[bytes | None, ...] = (
    b'{"event_id": "broken", "user_id": ',  # malformed JSON
    b"",  # empty value
    None,  # tombstone / null value
    b'{"event_id": "wrong-type", "user_id": "not-a-number"}',  # wrong type
    b'["an", "array"]',  # not an object
)


def sample_event(run: str, i: int) -> dict:
    """Sample event ``i``: its ``created_at`` one second after the one before, from 2026-01-01."""
    rnd = random.Random(i)
    return {
        "event_id": f"evt-{run}-{i:09d}",
        "user_id": rnd.randrange(10_000),
        "kind": KINDS[i % len(KINDS)],
        "amount": round(rnd.uniform(0, 500), 2),
        "created_at": (datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=i)).isoformat(),
    }


def year_event(run: str, i: int) -> dict:
    """Sample event ``i`` whose ``created_at`` falls on day ``i`` mod 365 of 2025: a year of days partitions touched
    by every few hundred records (history arriving late, a device's backlog)."""
    at = datetime(2025, 1, 1, tzinfo=UTC) + timedelta(days=i % 365, seconds=i % 86_400)
    return {**sample_event(run, i), "created_at": at.isoformat()}


class _SampleProducer:
    """A producer that counts failed deliveries and refuses to finish while any record is unacknowledged."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, **settings):
        ensure_topic(bootstrap, topic, partitions)
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        # Idempotent, as Kafka's own clients are by default: a retried batch can neither reorder nor double records.
        self.producer = Producer(logged({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                                         **settings}))
        self.failures: list[str] = []

    def _delivered(self, err, _msg) -> None:
        if err is not None:
            self.failures.append(str(err))

    def send(self, i: int, value: bytes | None, key: bytes | EllipsisType | None = ...) -> None:
        """Record ``i`` (key ``i`` unless ``key`` is given, None for none) to partition ``i mod partitions``,
        waiting while the queue is full."""
        key = str(i).encode() if key is ... else key
        while True:
            try:
                self.producer.produce(self.topic, value=value, key=key, partition=i % self.partitions,
                                      on_delivery=self._delivered)
                return
            except BufferError:
                self.producer.poll(0.1)

    def finish(self) -> None:
        remaining = self.producer.flush(60)
        if remaining or self.failures:
            raise SourceError(f"producing to {self.topic!r} on {self.bootstrap}: {remaining} records "
                              f"unacknowledged, {len(self.failures)} failed ({self.failures[:1]})")


def produce_sample(
    bootstrap: str,
    topic: str,
    count: int,
    partitions: int = 4,
    bad_every: int = 0,
    progress: Callable[[int], None] | None = None,
    event: Callable[[str, int], dict] = sample_event,
) -> dict[str, int]:
    """Write ``count`` records (``event(run, i)``) round-robin over the partitions; every ``bad_every``-th one is
    bad.

    Returns counts ``{"good": …, "bad": …}``. Raises if any record was not acknowledged.
    """
    out = _SampleProducer(bootstrap, topic, partitions, **{"linger.ms": 20, "batch.num.messages": 10000})
    run = uuid.uuid4().hex[:8]
    good = bad = 0
    for i in range(count):
        if bad_every and i % bad_every == bad_every - 1:
            value = BAD_VALUES[(i // bad_every) % len(BAD_VALUES)]
            bad += 1
        else:
            value = json.dumps(event(run, i)).encode()
            good += 1
        out.send(i, value)
        if i % 10000 == 0:
            out.producer.poll(0)
            if progress:
                progress(i)
    out.finish()
    return {"good": good, "bad": bad}


def produce_live(bootstrap: str, topic: str, per_second: float, stop: threading.Event,
                 partitions: int = 4, event: Callable[[str, int], dict] = sample_event) -> dict[str, int]:
    """Write sample events (``event(run, i)``) at ``per_second`` (in 10 ms steps, timestamped as they are sent) until
    ``stop`` is set; returns ``{"good": n, "bad": 0}``. Raises if any record was not acknowledged."""
    out = _SampleProducer(bootstrap, topic, partitions, **{"linger.ms": 5})
    run, sent, started = uuid.uuid4().hex[:8], 0, time.monotonic()
    while not stop.is_set():
        due = int((time.monotonic() - started) * per_second)
        for i in range(sent, due):
            out.send(i, json.dumps(event(run, i)).encode())
        sent = max(sent, due)
        out.producer.poll(0)
        time.sleep(0.01)
    out.finish()
    return {"good": sent, "bad": 0}
