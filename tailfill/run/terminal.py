"""What a command shows of its jobs' output, and where the rest goes.

Every line a job prints goes to the command's log file. The terminal gets the lines the job says for people, each
beginning with its label (progress, restarts, stops), and never a Python traceback, a JVM stack, Spark's or a
library's log lines: those are for the log file, which the command's last line names when the run failed. A job's
own ``error: …`` line stays in the log too: the command ends with one line that says the cause and its fix
(:func:`failure_line`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from tailfill.errors import ErrorInfo
from tailfill.redact import redact_text

OWN = re.compile(r"^\[[^\]\n]+\] ")  # a job's own line: its label or run id first, "[demo tail] 1,000 offsets …"
SAID = ("Spark Connect:", "WARNING: ")  # the other lines a job says for people (its session, a warning)
# What the JVM says as it starts, in the same words as a job's warning: "WARNING: Using incubator modules: …"
JVM_SAID = re.compile(r"^WARNING: (Using incubator modules|A restricted method|A terminally deprecated method|"
                      r"sun\.misc\.Unsafe|Restricted methods will be blocked|Use --enable-native-access|"
                      r"Please consider reporting)")


class JobOutput:
    """``on_line`` for a command's jobs: each line to ``log`` (opened on the first line), the job's own to
    ``show``. Safe to call from the threads of jobs run side by side."""

    def __init__(self, log: Path, show: Callable[[str], None]):
        self.log, self.show = log, show
        self._file: IO[str] | None = None
        self._lock = threading.Lock()
        self._broken = False

    def __call__(self, line: str) -> None:
        with self._lock:
            unwritable = self._write(line)
        if unwritable is not None:
            self.show(f"WARNING: the job's output goes to the terminal alone: its log {self.log} cannot be written "
                      f"({unwritable})")
        if self._shown(line):
            self.show(line)

    def _write(self, line: str) -> str | None:
        """Write ``line`` to the log; the error, once, if the log cannot be written (a full disk: lines are lost)."""
        if self._broken:
            return None
        try:
            if self._file is None:
                self.log.parent.mkdir(parents=True, exist_ok=True)
                self._file = self.log.open("a", buffering=1)
            self._file.write(line + "\n")
        except OSError as exc:
            self._broken = True
            return f"{type(exc).__name__}: {exc}"
        return None

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    @staticmethod
    def _shown(line: str) -> bool:
        """Whether ``line`` is one the job says for people (never a traceback's, a stack's or Spark's log line)."""
        return OWN.match(line) is not None or (line.startswith(SAID) and JVM_SAID.match(line) is None)


class CommandLog:
    """What a command's own process would otherwise print to its terminal for nobody in particular: an unexpected
    error's traceback, an exception in a library's thread or finalizer, library log records (a Spark Connect job's
    client runs in the command's process); all go to ``path``, made when first written, secrets redacted."""

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()

    def write(self, text: str) -> str:
        """Append ``text``; the log's path, or why it could not be written."""
        try:
            with self._lock:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with self.path.open("a") as out:
                    out.write(redact_text(text.rstrip("\n")) + "\n")
        except OSError as exc:
            return f"not written: {type(exc).__name__}: {exc}"
        return str(self.path)

    def flush(self) -> None:
        """For :class:`logging.StreamHandler`: every write is whole already."""

    @contextlib.contextmanager
    def diverting(self) -> Iterator[None]:
        """Within ``with``: threads' uncaught exceptions, unraisable ones and log records (WARNING and up) to this
        log, not the terminal; as they were afterwards."""
        handler = logging.StreamHandler(self)  # type: ignore[arg-type]
        handler.setLevel(logging.WARNING)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root, hooks = logging.getLogger(), (threading.excepthook, sys.unraisablehook)
        root.addHandler(handler)
        threading.excepthook = lambda args: self.write(
            f"in thread {args.thread.name if args.thread else '?'}:\n"
            + "".join(traceback.format_exception(args.exc_type, args.exc_value, args.exc_traceback)))
        sys.unraisablehook = lambda raised: self.write(
            f"{raised.err_msg or 'exception ignored'}: {raised.object!r}\n"
            + "".join(traceback.format_exception(raised.exc_type, raised.exc_value, raised.exc_traceback)))
        try:
            yield
        finally:
            root.removeHandler(handler)
            threading.excepthook, sys.unraisablehook = hooks


    @contextlib.contextmanager
    def children_stderr(self) -> Iterator[None]:
        """Within ``with``: processes started here write their stderr to this log for their whole life (a JVM that
        pyspark launches in the command's process inherits its stderr: its start-up warnings and Spark's log);
        this process's own stderr is the terminal again afterwards."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        sys.stderr.flush()
        saved = os.dup(2)
        try:
            with self.path.open("a") as log:
                os.dup2(log.fileno(), 2)
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)


def failure_line(what: str, error: ErrorInfo | None, code: int, log: Path | None) -> str:
    """The one line a failed command ends with: what failed, the cause, its fix, and where the full output is."""
    where = f"; the full output: {log}" if log is not None and log.exists() else ""
    if error is None:
        return f"{what} failed: its job ended (exit {code}) without saying why{where}"
    return f"{what} failed: {error} (fix: {error.fix}){where}"
