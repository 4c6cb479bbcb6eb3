"""A job asked to stop between batches by whoever runs it: the one flag its poll loop reads.

The caller of a job on Spark Connect runs its client in its own process and asks the flag directly
(:meth:`StopAsked.ask`). A ``spark-submit`` job is another process: its runner names a file in
``TAILFILL_STOP_FILE`` and writes it to ask (:func:`ask_by_file`), and the job watches for it
(:func:`stop_of_job`); SIGTERM or SIGINT to the job's own process asks the same. What the job committed
stays; the batch in flight finishes first (:mod:`tailfill.run.poll`).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

from tailfill.plumbing.durable import write_whole

WATCH_EVERY_S = 0.5
STOP_FILE_ENV = "TAILFILL_STOP_FILE"  # read through settings().stop_file


class StopAsked:
    """Whether a job was asked to stop between batches, and why (one short phrase)."""

    def __init__(self) -> None:
        self._asked = threading.Event()
        self.why = ""

    def ask(self, why: str) -> None:
        """Ask the job to stop after its batch in flight (the first reason given is kept)."""
        if not self._asked.is_set():
            self.why = why
            self._asked.set()

    @property
    def asked(self) -> bool:
        return self._asked.is_set()

    def wait(self, timeout: float) -> bool:
        return self._asked.wait(timeout)


def ask_by_file(path: Path, why: str) -> None:
    """Ask the job that watches ``path`` to stop between batches."""
    write_whole(path, why)


@contextlib.contextmanager
def stop_of_job(stop_file: Path | None) -> Iterator[StopAsked]:
    """This job process's stop, within ``with``: asked when ``stop_file`` appears (its text says why) or by SIGTERM or
    SIGINT to this process (handled only when entered from the main thread, where Python runs signal handlers; the
    handlers before are put back on the way out)."""
    stop = StopAsked()
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, lambda signum, _f: stop.ask(f"its process got "
                                                                           f"{signal.Signals(signum).name}"))
    done = threading.Event()
    if stop_file is not None:
        def watch() -> None:
            while not done.wait(WATCH_EVERY_S) and not stop.asked:
                if stop_file.exists():
                    stop.ask(stop_file.read_text().strip() or "its caller asked")

        threading.Thread(target=watch, name="stop-file", daemon=True).start()
    try:
        yield stop
    finally:
        done.set()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
