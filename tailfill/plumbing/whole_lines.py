"""Lines printed whole by threads that share a process's output.

``print`` writes a line and its newline in two calls, so two threads printing at once can leave one line's text
before the other's newline: ``A B\\n\\n``. A job's stdout and stderr also reach its runner through one pipe
(``spark-submit`` merges them), where an event glued to another line can no longer be read back.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TextIO

_LOCK = threading.Lock()  # one for every stream: they may share a pipe


def line_printer(stream: TextIO) -> Callable[[str], None]:
    """A function that writes one whole line to ``stream`` (text and newline in one write, flushed), never
    interleaved with another line printed by a function of this module."""

    def say(line: str) -> None:
        with _LOCK:
            stream.write(line + "\n")
            stream.flush()

    return say
