"""Over Spark Connect, a job waiting to restart keeps its session: the server closes a session idle for its
timeout, which is shorter than the longest wait before a restart (after infrastructure failures in a row)."""

from __future__ import annotations

import pytest

from tailfill.config import duration_seconds
from tailfill.run import connect_batch
from tailfill.run.connect_server import SESSION_TIMEOUT
from tailfill.run.query_state import QueryState, Tally
from tailfill.run.restarts import INFRASTRUCTURE_MAX_BACKOFF_S


class SessionClosed(Exception):
    """What the server answers a session it closed (``INVALID_HANDLE.SESSION_CLOSED``)."""


class Session:
    """A Connect session's settings on a fake clock: closed, as the server does, once nobody talked to it for
    the server's idle timeout."""

    def __init__(self):
        self.now = self.last_request = 0.0
        self.timeout = duration_seconds(SESSION_TIMEOUT)
        self.values: dict[str, str] = {}
        self.requests: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def _request(self) -> None:
        if self.now - self.last_request >= self.timeout:
            raise SessionClosed(f"idle for {self.now - self.last_request:.0f}s")
        self.last_request = self.now
        self.requests.append(self.now)

    def get(self, key, default=None):
        self._request()
        return self.values.get(key, default)

    def set(self, key, value):
        self._request()
        self.values[key] = value

    def unset(self, key):
        self._request()
        self.values.pop(key, None)


def remote_query() -> tuple[connect_batch.RemoteQuery, Session]:
    session = Session()
    req = type("Req", (), {"run_id": "backfill-1", "name": "backfill", "label": "backfill"})()
    spark = type("Spark", (), {"conf": session})()
    reports = type("Reports", (), {"read": lambda self: []})()
    return connect_batch.RemoteQuery(spark, req, reports, QueryState(Tally())), session


def test_the_longest_wait_before_a_restart_keeps_the_session_open_for_the_restart():
    remote, session = remote_query()
    assert session.timeout < INFRASTRUCTURE_MAX_BACKOFF_S  # why the wait must talk to the server
    remote.wait(INFRASTRUCTURE_MAX_BACKOFF_S, sleep=session.sleep)
    assert session.now == INFRASTRUCTURE_MAX_BACKOFF_S
    remote.forget()  # the restart's first requests find the session open
    gaps = [b - a for a, b in zip([0.0, *session.requests], session.requests, strict=False)]
    assert max(gaps) <= connect_batch.KEEP_ALIVE_S < session.timeout / 2, gaps


def test_a_silent_wait_as_long_loses_the_session():
    """The fake server closes idle sessions as the real one does: a plain sleep of the same length loses it."""
    remote, session = remote_query()
    session.sleep(INFRASTRUCTURE_MAX_BACKOFF_S)
    with pytest.raises(SessionClosed):
        remote.forget()


def test_no_wait_talks_to_nobody():
    remote, session = remote_query()
    remote.wait(0, sleep=session.sleep)
    assert session.requests == []
