"""Detached local processes (the embedded broker, the development registry, the local Spark Connect server):
the state file each records when it is up, whether it is alive, stopping it, and the loopback ports they
listen on."""

from __future__ import annotations

import functools
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tailfill.settings import LOOPBACK

PR_SET_PDEATHSIG = 1  # prctl(2): the signal this process gets when its parent dies


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def die_with_parent() -> None:
    """Have the kernel SIGKILL this process as soon as its parent dies (Linux; elsewhere nothing happens).

    For a process that runs a job for a parent that supervises it (an Airflow task under its worker, a job's Python
    driver under its ``spark-submit`` JVM): when the parent is killed outright, the job goes with it instead of
    running on, unseen, beside the retry."""
    _tie_to(os.getppid())


def dies_with_this_process() -> Callable[[], None] | None:
    """A ``preexec_fn`` for a child that the kernel SIGKILLs as soon as this process dies, however it dies (Linux;
    elsewhere None). The kernel ties the child to the thread that starts it: start it from a thread that outlives
    it (the main thread, or the one that waits for it)."""
    if _prctl() is None:
        return None
    parent = os.getpid()
    return lambda: _tie_to(parent)


@functools.cache
def _prctl() -> Callable[..., int] | None:
    """libc's ``prctl``, found once, before any fork (a child between fork and exec only calls it)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    return ctypes.CDLL(None, use_errno=True).prctl


def _tie_to(parent: int) -> None:
    """SIGKILL this process when its parent dies; at once if ``parent`` died before the kernel was told."""
    prctl = _prctl()
    if prctl is None or prctl(PR_SET_PDEATHSIG, signal.SIGKILL) != 0:
        return
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGKILL)


def port_free(port: int) -> bool:
    """Whether a server could listen on 127.0.0.1:``port`` now: bound as servers bind (``SO_REUSEADDR``), so the
    closed connections of the last process that listened there (TIME_WAIT for a minute) do not count."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((LOOPBACK, port))
            return True
        except OSError:
            return False


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a process of another user counts; one that exited and waits for its
    parent to collect it, a zombie, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return not zombie(pid)


def zombie(pid: int) -> bool:
    """Whether process ``pid`` has exited and only waits for its parent to collect it (Linux's ``/proc``): every
    thread of it has ended. Its first thread alone ended is not enough: a JVM's does, and the JVM runs on (its
    ports still open)."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    states = []
    for thread in threads:
        try:
            states.append(Path(f"/proc/{pid}/task/{thread}/stat").read_text().rpartition(")")[2].split()[:1])
        except OSError:  # ended while we looked
            continue
    return bool(states) and all(state in (["Z"], ["X"]) for state in states)


def started_at(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks since boot (Linux's ``/proc``), or None when it does not run: with
    the pid, it names one process (a pid may be reused, never with the same start)."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def boot_id() -> str:
    """This boot of this machine (Linux; elsewhere ''): a pid of an earlier boot names no process now."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def running(path: Path) -> dict | None:
    """The state a detached process recorded in ``path`` (``{"pid": …, …}``), if that process is alive."""
    if not path.exists():
        return None
    state = json.loads(path.read_text())
    return state if alive(state["pid"]) else None


def stop_detached(state: dict | None, path: Path, grace_s: float = 5.0) -> bool:
    """Stop the detached process of ``state`` (SIGTERM, SIGKILL after ``grace_s``) and forget ``path``, its
    state file; True if it was running."""
    path.unlink(missing_ok=True)
    if not state:
        return False
    os.kill(state["pid"], signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not alive(state["pid"]):
            break
        time.sleep(0.05)
    else:
        os.kill(state["pid"], signal.SIGKILL)
    return True
