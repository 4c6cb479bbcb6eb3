"""Lines printed by many threads at once come out whole: a job's events are read back from its output lines."""

import sys
import threading

import pytest

from tailfill.errors import IngestError
from tailfill.plumbing.whole_lines import line_printer
from tailfill.run.contract import read_event


class _Pipe:  # a stream that takes each write in pieces, as a pipe shared by threads may
    def __init__(self) -> None:
        self.parts: list[str] = []

    def write(self, text: str) -> int:
        for i in range(0, len(text), 7):
            self.parts.append(text[i:i + 7])
        return len(text)

    def flush(self) -> None:
        pass


def test_lines_printed_from_many_threads_at_once_are_read_back_whole():
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        out, err = _Pipe(), _Pipe()
        stdout, stderr = line_printer(out), line_printer(err)
        line = 'TAILFILL_RESULT {"results": [], "error": null, "run_id": "%s"}'
        start = threading.Barrier(8)

        def job(i: int) -> None:
            start.wait()
            for n in range(200):
                stdout(line % f"{i}-{n}")
                stderr(f"[job {i}] progress {n}")

        threads = [threading.Thread(target=job, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    ids = [read_event(text).run_id for text in "".join(out.parts).splitlines()]
    assert sorted(ids) == sorted(f"{i}-{n}" for i in range(8) for n in range(200))
    progress = "".join(err.parts).splitlines()
    assert len(progress) == 1600 and all(p.startswith("[job ") and p.count("progress") == 1 for p in progress)


def test_an_event_line_glued_to_another_is_an_error_naming_it():
    glued = 'TAILFILL_RESTART {"attempt": 2}TAILFILL_RESULT {"results": []}'
    with pytest.raises(IngestError, match=r"cannot be read as one .*Extra data.*TAILFILL_RESTART"):
        read_event(glued)
