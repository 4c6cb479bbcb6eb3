"""Peak resident memory of one Tailfill home's processes while a benchmark step runs, by kind of process.

Processes are attributed by their environment (``TAILFILL_HOME`` is the step's home), never by what else runs
on the machine: Spark's JVM (the driver, with its executors in ``local`` mode, or the Connect server), Spark's
Python workers (executor daemons and workers, the streaming source's runner, ``foreachBatch``), and the
client (the ``tailfill`` command). Each process counts its proportional set size (PSS: its private pages, and
its share of the pages it shares, such as a forked Python worker's with its daemon), so the sum of a kind is
what its processes hold together. Sampled every half second from ``/proc``: a peak between two samples can be
missed, so the figures are a lower bound of the true peaks.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

KINDS = ("Spark JVM", "Python workers", "client")


def kind_of(cmdline: list[str]) -> str | None:
    """Which of :data:`KINDS` a process with this command line is; None for the others (the broker, a shell)."""
    if not cmdline:
        return None
    if Path(cmdline[0]).name == "java":
        return KINDS[0]
    if any("pyspark" in arg for arg in cmdline[1:]):
        return KINDS[1]
    return KINDS[2] if len(cmdline) > 1 and Path(cmdline[1]).name == "tailfill" else None


def _pss(pid: str) -> int:
    """The process's proportional set size in bytes (``/proc/<pid>/smaps_rollup``)."""
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    raise ValueError(f"no Pss for {pid}")


def _sample(marker: bytes) -> dict[str, int]:
    """Resident bytes now, by kind, of the processes whose environment holds ``marker``."""
    total = dict.fromkeys(KINDS, 0)
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if marker not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
            resident = _pss(pid)
        except (OSError, IndexError, ValueError):  # gone meanwhile, or not ours to read
            continue
        kind = kind_of(cmdline)
        if kind is not None:
            total[kind] += resident
    return total


class PeakMemory:
    """``with PeakMemory(home) as peak: …`` samples until the block ends; then ``peak.peaks`` (bytes by kind)."""

    def __init__(self, home: Path, every_s: float = 0.5):
        self.marker = f"TAILFILL_HOME={home}".encode()
        self.every_s = every_s
        self.peaks = dict.fromkeys(KINDS, 0)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="peak-memory", daemon=True)

    def _run(self) -> None:
        while True:
            for kind, resident in _sample(self.marker).items():
                self.peaks[kind] = max(self.peaks[kind], resident)
            if self._done.wait(self.every_s):
                return

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._done.set()
        self._thread.join()

    def asstr(self) -> str:
        """``Spark JVM 1,234 MB, Python workers 567 MB, client 89 MB`` (peaks of PSS summed by kind)."""
        return ", ".join(f"{kind} {self.peaks[kind] / 2**20:,.0f} MB" for kind in KINDS)
