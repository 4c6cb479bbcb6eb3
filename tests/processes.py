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


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children, their children, …), found by their parent ids."""
    parents: dict[int, int] = {}
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):
            if proc.name.isdigit():
                parents[int(proc.name)] = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
    found, todo = [], [pid]
    while todo:
        up = todo.pop()
        below = [child for child, parent in parents.items() if parent == up]
        found += below
        todo += below
    return found


def listening(marker: bytes, root: int | None = None) -> list[tuple[int, str, int]]:
    """The TCP sockets that processes carrying ``marker`` (or below ``root``: a process that rewrote its
    title may have overwritten its environment) listen on: ``(pid, address, port)``."""
    import ipaddress

    sockets: dict[str, tuple[str, int]] = {}  # inode → (address, port) of every listening socket
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A":  # TCP_LISTEN
                continue
            raw, port = fields[1].split(":")
            data = bytes.fromhex(raw)
            data = b"".join(data[i:i + 4][::-1] for i in range(0, len(data), 4))  # host-order 32-bit words
            sockets[fields[9]] = (str(ipaddress.ip_address(data)), int(port, 16))
    found = []
    for pid in sorted(set(processes_with(marker)) | set(descendants(root) if root else ())):
        with contextlib.suppress(OSError):
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(OSError):
                    target = os.readlink(fd)
                    if target.startswith("socket:[") and (inode := target[8:-1]) in sockets:
                        found.append((pid, *sockets[inode]))
    return sorted(set(found))
