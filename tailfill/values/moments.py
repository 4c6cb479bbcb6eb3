"""A moment in the words ``status`` uses: ``2026-11-29 16:40:12 UTC (3m12s ago)``."""

from __future__ import annotations

from datetime import UTC, datetime


def age(seconds: float) -> str:
    """``3s``, ``3m12s``, ``2h05m``: how long, in whole seconds (never negative)."""
    seconds = max(int(seconds), 0)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def utc(at: float) -> str:
    """Unix time ``at`` as ``2026-11-29 16:40:12 UTC``."""
    return f"{datetime.fromtimestamp(at, UTC):%Y-%m-%d %H:%M:%S} UTC"


def moment(at: float, now: float) -> str:
    """Unix time ``at`` in UTC, and how long before ``now`` it was."""
    return f"{utc(at)} ({age(now - at)} ago)"
