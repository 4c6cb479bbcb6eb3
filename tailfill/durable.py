"""Local state files that a kill at any moment leaves whole: atomic rewrites, appends that heal torn lines.

Every process of a run may be SIGKILLed between any two instructions. A file rewritten in place
can then be left empty or half-written, and a line appended to a log can be left without its
newline, so that the next append joins two records into one unreadable line. These helpers make
both impossible to observe: :func:`write_atomic` replaces a file in one rename, :func:`append_line`
first ends a torn last line, and :func:`complete_lines` reads only lines that were finished.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, data: str | bytes) -> None:
    """Replace ``path`` with ``data`` in one rename: a reader sees the old file or the new one, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def append_line(path: Path, line: str) -> None:
    """Append ``line`` and a newline; a torn last line (a writer killed mid-line) is ended first.

    The torn line stays in the file as a line of its own, which :func:`complete_lines` callers
    then see as unparseable instead of as a corruption of the record appended after it.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab+") as f:
        f.seek(0, os.SEEK_END)
        torn = False
        if f.tell():
            f.seek(-1, os.SEEK_END)
            torn = f.read(1) != b"\n"
        f.write((("\n" if torn else "") + line + "\n").encode())


def complete_lines(path: Path) -> list[str]:
    """The non-blank lines of ``path`` that end in a newline (none if it does not exist).

    A last line without its newline is still being written, or was torn by a kill: not a line yet.
    """
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    return [line for line in text.split("\n")[:-1] if line.strip()]
