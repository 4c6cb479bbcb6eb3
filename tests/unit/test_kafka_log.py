"""librdkafka's log through Python logging: one line per distinct problem, a broker that cannot be reached at INFO."""

from __future__ import annotations

import logging

from tailfill.source.kafka_log import LOGGER, OncePerProblem, logged

REFUSED = ("[thrd:127.0.0.1:1/bootstrap]: 127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: "
           "Connection refused (after {ms}ms in state CONNECT{suppressed})")


def record(level: int, facility: str, client: str, text: str) -> logging.LogRecord:
    """A record as confluent-kafka logs it."""
    return logging.LogRecord("tailfill.kafka", level, __file__, 1, "%s [%s] %s", (facility, client, text), None)


def passed(once: OncePerProblem, records: list[logging.LogRecord]) -> list[logging.LogRecord]:
    return [r for r in records if once.filter(r)]


def test_retries_of_one_problem_are_one_line_at_info():
    once = OncePerProblem()
    retries = [record(logging.ERROR, "FAIL", f"rdkafka#consumer-{i % 3 + 1}",
                      REFUSED.format(ms=i % 7, suppressed=f", {i} identical error(s) suppressed" if i % 2 else ""))
               for i in range(192)]
    out = passed(once, retries)
    assert len(out) == 1
    assert out[0].getMessage() == ("kafka FAIL: 127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: "
                                   "Connection refused (after 0ms in state CONNECT)")
    assert out[0].levelno == logging.INFO  # the caller's own error is the line a person sees


def test_distinct_problems_each_get_their_line_at_their_level():
    once = OncePerProblem()
    auth = "[thrd:sasl]: 10.0.0.1:9092/1: SASL authentication error: Authentication failed (after 12ms in state AUTH)"
    out = passed(once, [record(logging.ERROR, "FAIL", "rdkafka#consumer-1", auth),
                        record(logging.ERROR, "FAIL", "rdkafka#consumer-2", auth),
                        record(logging.WARNING, "MAXPOLL", "rdkafka#consumer-1", "[thrd:main]: poll interval exceeded"),
                        record(logging.ERROR, "FAIL", "rdkafka#consumer-1", REFUSED.format(ms=0, suppressed=""))])
    assert [(r.args[0], r.levelno) for r in out] == [("FAIL", logging.ERROR), ("MAXPOLL", logging.WARNING),
                                                     ("FAIL", logging.INFO)]


def test_a_problem_is_said_again_after_the_repeat_interval():
    once = OncePerProblem(repeat_after_s=0.0)
    line = REFUSED.format(ms=0, suppressed="")
    assert len(passed(once, [record(logging.ERROR, "FAIL", "c", line) for _ in range(3)])) == 3


def test_every_client_config_gets_the_logger():
    assert logged({"bootstrap.servers": "x"}) == {"bootstrap.servers": "x", "logger": LOGGER}
    assert any(isinstance(f, OncePerProblem) for f in LOGGER.filters)


def test_a_coordinator_still_loading_on_a_fresh_broker_is_info():
    """What a first idempotent producer on a broker that just started meets, and librdkafka retries."""
    text = ("[thrd:main]: Failed to acquire idempotence PID from broker 127.0.0.1:52333/1: Broker: Coordinator "
            "load in progress: retrying")
    [out] = passed(OncePerProblem(), [record(logging.WARNING, "GETPID", "rdkafka#producer-1", text)])
    assert out.levelno == logging.INFO
