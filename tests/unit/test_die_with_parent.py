"""A job's process that asked to die with its parent goes when the parent is killed (an Airflow task under a
worker killed outright)."""

import subprocess
import sys
import time

import pytest

from tailfill.plumbing.detached import alive

PARENT = """
import os, subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "from tailfill.plumbing.detached import die_with_parent; "
                          "die_with_parent(); print('ready', flush=True); import time; time.sleep(120)"],
                         stdout=subprocess.PIPE, text=True)
assert child.stdout.readline().strip() == "ready"
print(child.pid, flush=True)
os.kill(os.getpid(), 9)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl(PR_SET_PDEATHSIG) is Linux's")
def test_a_process_that_asked_to_die_with_its_parent_is_gone_when_the_parent_is_killed():
    out = subprocess.run([sys.executable, "-c", PARENT], capture_output=True, text=True, timeout=60).stdout
    child = int(out.split()[0])
    deadline = time.monotonic() + 30
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(child), "the child outlived its killed parent"
