"""``make airflow-stop``: the local Airflow, stopped from another shell, leaves no process of its own running."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from airflow_server import REPO, AirflowServer
from helpers import wait_until
from processes import processes_with

pytestmark = pytest.mark.integration


def test_airflow_stop_stops_every_process_the_launcher_started(tmp_path):
    pipelines = tmp_path / "pipelines"  # no pipeline: no embedded broker to start
    pipelines.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "TAILFILL_AIRFLOW_DB"}  # the launcher's own Postgres too
    env |= {"TAILFILL_HOME": str(tmp_path / "home"), "TAILFILL_PIPELINES": str(pipelines)}
    base = Path(tempfile.mkdtemp(prefix="tailfill-af-"))  # its Postgres runs as the postgres user under root:
    base.chmod(0o755)  # its data folder is outside pytest's private tmp folder
    try:
        stop_and_check(AirflowServer(base / "airflow", env=env))
    finally:
        shutil.rmtree(base, ignore_errors=True)


def stop_and_check(airflow: AirflowServer) -> None:
    """Start ``airflow``, stop it as `make airflow-stop` does, and check nothing of it is left."""
    with airflow as server:
        running = processes_with(server.marker)
        assert len(running) >= 6, running  # api-server, scheduler, dag-processor, triggerer, log servers, Postgres

        stop = subprocess.run([sys.executable, "-m", "tailfill_airflow.local", "--stop"], env=server.env, cwd=REPO,
                              capture_output=True, text=True, timeout=300)
        assert stop.returncode == 0, stop.stderr
        assert stop.stdout.startswith("Airflow stopped (launcher pid"), stop.stdout
        try:  # the launcher has exited; a child the kernel is still taking down may outlive it by moments
            wait_until(lambda: not processes_with(server.marker), "the stopped Airflow's processes to go", 30)
        except AssertionError:
            left = {pid: command_of(pid) for pid in processes_with(server.marker)}
            assert left == {}

        again = subprocess.run([sys.executable, "-m", "tailfill_airflow.local", "--stop"], env=server.env, cwd=REPO,
                               capture_output=True, text=True, timeout=60)
        assert again.returncode == 0 and again.stdout.startswith("no local Airflow runs"), again.stdout
    assert server.leftovers == []  # nothing was left for the test's own cleanup to kill


def command_of(pid: int) -> str:
    """A process's command line, for the message of a process left running."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:300]
    except OSError:
        return "(gone)"
