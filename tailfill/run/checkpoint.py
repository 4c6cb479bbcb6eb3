"""A request's Spark checkpoint, made safe to start from whatever a kill left in it.

The table's ledger is the one resume truth; a Spark checkpoint only lets a restarted query replay
a planned batch with the *same* offsets (``offsets/N`` written, ``commits/N`` not). So a checkpoint
is disposable: what Spark would refuse, or what holds no planned batch, is discarded and the query
starts from the ledger. Spark writes its logs atomically (a hidden ``.N.<uuid>.tmp`` renamed to
``N``), so a SIGKILL leaves at most such temp files behind — but Spark 4 then refuses to start
batch 0 (``STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY``), and since a checkpoint is named by its
request's bounds, every later run of the same request would fail the same way.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

LOGS = ("offsets", "commits")  # Spark's write-ahead log and commit log: one file per batch id
_LOG_VERSION = re.compile(r"^v\d+$")


def is_leftover(path: Path) -> bool:
    """A partial file of an atomic write that never finished: ``.name.<uuid>.tmp`` or its ``.crc``."""
    name = path.name
    return name.startswith(".") and (name.endswith(".tmp") or name.endswith(".tmp.crc"))


@dataclass
class CheckpointState:
    """What a checkpoint folder holds, read without Spark."""

    leftovers: list[Path] = field(default_factory=list)  # partial files a kill left
    planned: list[int] = field(default_factory=list)  # batch ids in offsets/
    committed: list[int] = field(default_factory=list)  # batch ids in commits/
    unreadable: list[str] = field(default_factory=list)  # files Spark would fail on, with why

    @property
    def replayable(self) -> int | None:
        """The batch Spark will replay with its recorded offsets, if one was planned and not committed."""
        pending = sorted(set(self.planned) - set(self.committed))
        return pending[-1] if pending else None


def _log_problem(path: Path) -> str | None:
    """Why Spark could not read one of its log files, or None."""
    try:
        with path.open("rb") as f:
            first = f.readline().decode(errors="replace").strip()
    except OSError as exc:
        return str(exc)
    if not first:
        return "empty"
    return None if _LOG_VERSION.match(first) else f"no log version on its first line ({first[:40]!r})"


def inspect(checkpoint: Path) -> CheckpointState:
    """Read ``checkpoint``'s logs and find what a kill left half-written."""
    state = CheckpointState()
    if not checkpoint.is_dir():
        return state
    state.leftovers = sorted(p for p in checkpoint.rglob(".*") if p.is_file() and is_leftover(p))
    for log in LOGS:
        folder = checkpoint / log
        if not folder.is_dir():
            continue
        for path in folder.iterdir():
            if not path.name.isdigit():
                continue
            problem = _log_problem(path)
            if problem:
                state.unreadable.append(f"{log}/{path.name}: {problem}")
            else:
                (state.planned if log == "offsets" else state.committed).append(int(path.name))
    metadata = checkpoint / "metadata"
    if metadata.exists() and not metadata.read_bytes().strip():
        state.unreadable.append("metadata: empty")
    return state


def discard(checkpoint: Path, keep: Callable[[Path], bool] = lambda p: False) -> None:
    """Remove what Spark wrote into ``checkpoint``; files ``keep`` names (Tailfill's own notes) stay."""
    if not checkpoint.is_dir():
        return
    for path in checkpoint.iterdir():
        if keep(path):
            continue
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def make_startable(checkpoint: Path, label: str, log: Callable[[str], None],
                   keep: Callable[[Path], bool] = lambda p: False) -> CheckpointState:
    """Leave ``checkpoint`` in a state Spark starts from, saying in one line what was removed.

    Partial files are removed. A checkpoint with an unreadable log file, or without a planned batch
    to replay, is emptied: the query then starts at its request's start, which the ledger gave.
    A planned, uncommitted batch is kept, so Spark replays it with the same offsets until it commits.
    """
    state = inspect(checkpoint)
    for path in state.leftovers:
        path.unlink(missing_ok=True)
    spark_files = checkpoint.is_dir() and any(not keep(p) for p in checkpoint.iterdir())
    if state.unreadable or (not state.planned and spark_files):
        why = ("unreadable: " + ", ".join(state.unreadable)) if state.unreadable else "it holds no planned batch"
        discard(checkpoint, keep)
        extra = f" and {len(state.leftovers)} partial file(s) a kill left" if state.leftovers else ""
        log(f"[{label}] discarded the Spark checkpoint {checkpoint.name} ({why}{extra}); "
            "starting from the table's ledger")
        return CheckpointState()
    if state.leftovers:
        replay = state.replayable
        what = f"; batch {replay} is replayed with its recorded offsets" if replay is not None else ""
        log(f"[{label}] removed {len(state.leftovers)} partial file(s) a kill left in the Spark checkpoint "
            f"{checkpoint.name}: " + ", ".join(str(p.relative_to(checkpoint)) for p in state.leftovers[:4])
            + (" …" if len(state.leftovers) > 4 else "") + what)
        state.leftovers = []
    return state


QUERY_DESCRIPTION = "=== Streaming Query ==="  # what Spark appends to a query's failure: its ids, offsets, plan


def refused(kind: str, message: str, checkpoint: Path) -> bool:
    """Whether a query's failure is Spark refusing ``checkpoint`` (its error names the checkpoint). The query's
    description Spark appends to every failure (``=== Streaming Query ===``, its plan naming the checkpoint
    location) is not the error: read, it made every failure a refusal and every restart discard the checkpoint."""
    text = f"{kind}: {message}".split(QUERY_DESCRIPTION, 1)[0]
    return "CHECKPOINT" in text.upper() and (str(checkpoint) in text or "checkpoint location" in text.lower())
