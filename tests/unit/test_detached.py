"""Whether a detached process runs: an exited child its parent has not collected yet is not running."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from tailfill.plumbing.detached import alive, running, stop_detached, zombie


def exited_uncollected() -> subprocess.Popen:
    """A child that has exited and is not waited for (a zombie until its Popen is polled)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 60
    while not zombie(proc.pid):
        assert time.monotonic() < deadline, "the child never exited"
        time.sleep(0.05)
    return proc


def test_a_running_process_is_alive_and_an_exited_uncollected_one_is_not(tmp_path):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert alive(sleeper.pid) and not zombie(sleeper.pid)
    finally:
        sleeper.kill()
        sleeper.wait()
    done = exited_uncollected()
    assert not alive(done.pid)
    state = tmp_path / "server.json"
    state.write_text(json.dumps({"pid": done.pid}))
    assert running(state) is None  # a server whose process exited is not running, collected or not
    done.wait()


LEADER_GONE = """
import ctypes, threading, time
threading.Thread(target=time.sleep, args=(60,)).start()
print("threads up", flush=True)
ctypes.CDLL(None).pthread_exit(None)  # the first thread ends, as a JVM's does; the process runs on
"""


def test_a_process_whose_first_thread_ended_while_others_run_is_alive():
    proc = subprocess.Popen([sys.executable, "-c", LEADER_GONE], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "threads up"
        deadline = time.monotonic() + 60
        while Path(f"/proc/{proc.pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z":
            assert time.monotonic() < deadline, "the first thread never ended"
            time.sleep(0.05)
        assert alive(proc.pid) and not zombie(proc.pid)  # its first thread is a zombie; the process is not
    finally:
        proc.kill()
        proc.wait()


def test_stopping_a_server_that_already_exited_forgets_it_without_waiting_out_its_grace(tmp_path):
    done = exited_uncollected()
    state = tmp_path / "server.json"
    state.write_text(json.dumps({"pid": done.pid}))
    # A grace longer than any test: a stop that waited for the zombie to go away would never return.
    assert stop_detached({"pid": done.pid}, state, grace_s=3600) is True
    assert not state.exists()
    done.wait()
