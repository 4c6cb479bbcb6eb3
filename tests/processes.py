"""Find and kill the processes a test started, by a marker in their environment (never by name)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path


def processes_with(marker: bytes) -> list[int]:
    """PIDs (not ours) whose initial environment holds the exact entry ``marker`` (``NAME=value``)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if marker in (proc / "environ").read_bytes().split(b"\0"):
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


def kill_marked(marker: bytes, timeout: float = 20) -> list[int]:
    """SIGKILL every process carrying ``marker`` until none is left; returns the PIDs that were found."""
    found: set[int] = set()
    deadline = time.monotonic() + timeout
    while left := processes_with(marker):
        found.update(left)
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes still running after SIGKILL: {left}")
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)
    return sorted(found)
