"""A backfill's verdict, decided in one place: the backfill DAG's ``summary`` XCom, its run's tab and the CLI's
result line all say what :func:`backfill_verdict` decides.

A backfill that replayed committed offsets (*Already-committed ranges* ``replay``, ``--on-committed replay``)
did work even when no lane ran: it is ``REPLAYED``, never ``NOTHING_TO_DO``.
"""

from __future__ import annotations

from dataclasses import dataclass

COMPLETE = "COMPLETE"
REPLAYED = "REPLAYED"
NOTHING_TO_DO = "NOTHING_TO_DO"


@dataclass(frozen=True)
class Verdict:
    """A run's verdict: ``code`` for machines (the ``verdict`` XCom field), ``headline`` for people."""

    code: str
    headline: str


def backfill_verdict(lanes: int, offsets: int, replayed: int = 0) -> Verdict:
    """The verdict of a backfill whose ``lanes`` validated lanes covered ``offsets`` offsets, after it replayed
    ``replayed`` committed offsets (0: none)."""
    again = f"REPLAYED {replayed:,} offsets" if replayed else ""
    if lanes:
        return Verdict(COMPLETE, f"COMPLETE: every one of {offsets:,} offsets landed exactly once"
                       + (f"; {again} (their rows replaced)" if again else ""))
    if replayed:
        return Verdict(REPLAYED, f"{again}: their rows were re-read and replaced; nothing else of the range was "
                                 "left to backfill")
    return Verdict(NOTHING_TO_DO, "Nothing to do: every offset of the requested range is committed already (or the "
                                  "range is empty); no Spark job was started")
