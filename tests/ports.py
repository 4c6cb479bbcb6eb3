"""Ports for servers a test stops and starts again on the same address.

A port the kernel hands out as free (``bind(0)``) lies in the ephemeral range, which it also uses for the
local end of outgoing connections: while a server is down, a client connecting elsewhere may take its port,
and the server cannot come back on it (``Address already in use``). These ports lie below that range.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

LOWEST = 10_000


def ephemeral_start() -> int:
    """The first port of the kernel's ephemeral range (32768 when it cannot be read)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def restartable_port(below: int | None = None, twin_offset: int = 0) -> int:
    """A free loopback port below the ephemeral range (and ``below``), with ``port + twin_offset`` free too
    when ``twin_offset`` is given; never handed to outgoing connections, so it stays ours across a restart."""
    top = min(below or ephemeral_start(), ephemeral_start() - twin_offset)
    for _ in range(1_000):
        port = random.randint(LOWEST, top - 1)
        if all(_bindable(p) for p in {port, port + twin_offset}):
            return port
    raise RuntimeError(f"no free port in [{LOWEST}, {top}) on 127.0.0.1")


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False
