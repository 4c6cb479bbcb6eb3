"""librdkafka's log through Python logging, one line per distinct problem.

Every Kafka client Tailfill makes gets :func:`logged` settings: librdkafka hands its log lines to the
``tailfill.kafka`` logger (served when the client is polled) instead of printing them to stderr, and
:class:`OncePerProblem` lets through the first line of each distinct problem only: a broker that is
down is one line, not one per reconnect attempt. The same problem is said again after
``REPEAT_AFTER_S``. A broker that cannot be reached is logged at INFO: librdkafka retries it, and a
caller that cannot go on raises its own error naming the broker, so that by default the failure is
that one line.
"""

from __future__ import annotations

import logging
import re
import threading
import time

REPEAT_AFTER_S = 300.0
_THREAD = re.compile(r"^\[thrd:[^\]]*\]:\s*")
# What changes between retries of one problem: durations, counts of suppressed repeats, client instance ids.
_VARYING = re.compile(r"\d+(\.\d+)?\s*ms\b|,?\s*\d+ identical error\(s\) suppressed|#(consumer|producer)-\d+")
# A broker that cannot be reached (refused, gone, timed out), or a coordinator still loading its state after the
# broker started ("Coordinator load in progress": a first idempotent producer on a fresh broker meets it): librdkafka
# retries it, and a caller that cannot go on without the broker raises its own error naming it; logged at INFO so
# that such a failure is that one line, and a success none.
_TRANSPORT = re.compile(r"Connect to .* failed|Connection refused|Disconnected|timed out|Host resolution failure|"
                        r"load in progress", re.IGNORECASE)


class OncePerProblem(logging.Filter):
    """Pass a librdkafka record the first time its problem is seen (again after ``repeat_after_s``), rewritten
    as ``kafka FACILITY: message``; drop the repeats."""

    def __init__(self, repeat_after_s: float = REPEAT_AFTER_S):
        super().__init__()
        self.repeat_after_s = repeat_after_s
        self._seen: dict[str, float] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        facility, text = _parts(record)
        key = f"{record.levelno} {facility} {_VARYING.sub('', text)}"
        now = time.monotonic()
        with self._lock:
            last = self._seen.get(key)
            if last is not None and now - last < self.repeat_after_s:
                return False
            if len(self._seen) > 1000:  # a bound on memory, not a policy: forget the oldest half
                for old in sorted(self._seen, key=self._seen.get)[:500]:
                    del self._seen[old]
            self._seen[key] = now
        record.msg, record.args = "kafka %s: %s", (facility, text)
        if record.levelno > logging.INFO and _TRANSPORT.search(text):
            record.levelno, record.levelname = logging.INFO, logging.getLevelName(logging.INFO)
        return True


def _parts(record: logging.LogRecord) -> tuple[str, str]:
    """(facility, message without librdkafka's thread prefix) of a record confluent-kafka logged."""
    args = record.args if isinstance(record.args, tuple) else ()
    if len(args) == 3:  # confluent-kafka logs ("%s [%s] %s", facility, client name, message)
        return str(args[0]), _THREAD.sub("", str(args[2]))
    return "LOG", record.getMessage()


LOGGER = logging.getLogger("tailfill.kafka")
if not any(isinstance(f, OncePerProblem) for f in LOGGER.filters):
    LOGGER.addFilter(OncePerProblem())


def logged(conf: dict) -> dict:
    """``conf`` with librdkafka's log going to the ``tailfill.kafka`` logger (see the module's docstring)."""
    return {**conf, "logger": LOGGER}
