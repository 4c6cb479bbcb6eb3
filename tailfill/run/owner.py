"""A command owns the jobs it starts, on every runner.

SIGINT or SIGTERM to the command asks each of its jobs to stop after its batch in flight
(:meth:`~tailfill.run.runners.JobRun.stop`), said in one line; a second signal, or a stop that takes longer than
:data:`STOP_PATIENCE_S`, kills them (:meth:`~tailfill.run.runners.JobRun.kill`). A signal before any job started
ends the command at once (:class:`Signalled`). Whatever ends the command, a job still running is killed on the
way out; a command killed outright takes its ``spark-submit`` jobs with it by the kernel
(:func:`~tailfill.plumbing.detached.dies_with_this_process`).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Protocol, TypeVar

from tailfill.run.poll import STOP_BETWEEN_BATCHES_S

STOP_PATIENCE_S = STOP_BETWEEN_BATCHES_S + 60.0  # a job waits this long for its batch in flight, then its end
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stoppable(Protocol):
    def stop(self, why: str) -> None: ...

    def kill(self) -> None: ...


Run = TypeVar("Run", bound=Stoppable)


class Signalled(BaseException):
    """A signal ended the command before any of its jobs started."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class JobOwner:
    """Within ``with``: the command's signal handlers, and the jobs it :meth:`track`\\ s. ``what``: the jobs, in
    words ("the backfill of demo"); ``say``: where its one line goes."""

    def __init__(self, what: str, say: Callable[[str], None], patience_s: float = STOP_PATIENCE_S):
        self.what, self.say, self.patience_s = what, say, patience_s
        self.runs: list[Stoppable] = []
        self.signum: int | None = None
        self._previous: dict[int, object] = {}
        self._timer: threading.Timer | None = None

    def track(self, run: Run) -> Run:
        """``run`` is this command's: stopped with it, killed if it outlives it."""
        self.runs.append(run)
        if self.signum is not None:  # started while the others were asked to stop
            run.stop(self._why())
        return run

    @property
    def exit_code(self) -> int | None:
        """The command's exit code when a signal stopped it (128 + the signal), else None."""
        return None if self.signum is None else 128 + self.signum

    def __enter__(self) -> JobOwner:
        if threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:  # set even where the parent left them ignored (a command started in the background)
                self._previous[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)  # type: ignore[arg-type]
        if self._timer is not None:
            self._timer.cancel()
        if kind is not None:
            self.kill_all()  # the command ends on an error: its jobs end with it

    def kill_all(self) -> None:
        for run in self.runs:
            try:
                run.kill()
            except Exception as exc:  # one that cannot be killed must not spare the others
                self.say(f"could not kill a job of {self.what}: {type(exc).__name__}: {exc}")

    def _why(self) -> str:
        return f"its command got {signal.Signals(self.signum or signal.SIGTERM).name}"

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.signum is not None:
            self.say(f"{name} again: killing {self.what} now (what it committed stays)")
            self.kill_all()
            return
        self.signum = signum
        if not self.runs:
            raise Signalled(signum)
        self.say(f"{name}: stopping {self.what} after its batch in flight (a second signal kills it now)")
        for run in self.runs:
            run.stop(self._why())
        self._timer = threading.Timer(self.patience_s, self._out_of_patience)
        self._timer.daemon = True
        self._timer.start()

    def _out_of_patience(self) -> None:
        self.say(f"{self.what} did not stop within {self.patience_s:.0f}s: killing it (what it committed stays)")
        self.kill_all()
