"""A foreachBatch DataFrame on Spark Connect is let go without a blocking call to the server.

pyspark's finalizer of a cached remote relation asks the server to drop it with a call that has no deadline;
the server drops a batch's DataFrame itself, and that call was seen hanging a query for good. These run
pyspark's own finalizer against a client that records what it is asked.
"""

from __future__ import annotations

import gc

from pyspark.sql.connect.plan import CachedRemoteRelation

from tailfill.run.connect_batch import release_locally


class RecordingClient:
    """What pyspark's finalizer reaches for: whether the client is closed, and the call it would make."""

    is_closed = False
    _user_id = None

    def __init__(self) -> None:
        self.asked: list[str] = []

    def _execute_plan_request_with_metadata(self):
        self.asked.append("remove cached relation")
        raise RuntimeError("not a server")  # pyspark logs this and goes on


class Session:
    def __init__(self) -> None:
        self.client = RecordingClient()


class Batch:
    def __init__(self, plan: CachedRemoteRelation) -> None:
        self._plan = plan


def asked_after_dropping(release: bool) -> list[str]:
    """What the server is asked once a batch DataFrame of a session is dropped, released first or not."""
    session = Session()
    batch = Batch(CachedRemoteRelation("df-1", session))  # type: ignore[arg-type]
    if release:
        release_locally(batch)  # type: ignore[arg-type]
    del batch
    gc.collect()
    return session.client.asked


def test_without_release_the_finalizer_calls_the_server():
    assert asked_after_dropping(release=False) == ["remove cached relation"]


def test_a_released_batch_makes_no_call():
    assert asked_after_dropping(release=True) == []
