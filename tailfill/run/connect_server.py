"""The local Spark Connect server of a Tailfill home: started on demand, supervised, stopped. No pyspark here.

It is Spark's own server class from the pyspark wheel (``SparkConnectServer``, started with
``spark-submit --class``), bound to loopback on a free port, on :func:`tailfill.run.runtime.master` with
Tailfill's Spark settings. Its address is recorded in ``$TAILFILL_HOME/connect-server.json`` with the
digests of the settings it was started with (``TAILFILL_*``, ``AWS_*``, Spark's, the pipeline's secrets:
compared, never sent or printed). A job whose settings differ gets a new server when the running one is
idle, else a one-line refusal naming the settings. The code never needs a new server: each job's
session ships its own (:mod:`tailfill.run.spark_connect`). Jobs of this home register themselves while
they run (``connect-jobs/``), which is how the server is known to be idle.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Mapping
from pathlib import Path

from tailfill.errors import SparkServerError
from tailfill.plumbing.detached import alive, free_port, port_free, running, stop_detached
from tailfill.plumbing.durable import locked, write_whole
from tailfill.run import runtime
from tailfill.run.server_settings import differing_settings, job_env_digests, server_env
from tailfill.run.worker_python import worker_python
from tailfill.settings import LOOPBACK, settings

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
START_TIMEOUT_S = 180.0  # a JVM on a busy 2-core machine
SESSION_TIMEOUT = "60s"  # a session nobody talks to (its client was killed) ends, and its queries with it
# Spark (4.1, 4.2) keeps a Python daemon per query's artifacts until the server stops (SPARK-54055): an idle server
# that has this many is replaced, so that a long-lived server's processes do not grow with the jobs it ran.
RECYCLE_ENV = "TAILFILL_CONNECT_RECYCLE_DAEMONS"
RECYCLE_DAEMONS = 24


def state_file(home: Path | None = None) -> Path:
    """The local Connect server's address file: ``$TAILFILL_HOME/connect-server.json``."""
    return (home or settings().home) / "connect-server.json"


def server_state(home: Path | None = None) -> dict | None:
    """The running local server's ``{pid, url, port, master, settings, …}``, or None. A server replaced or
    restarted after its death takes the same port again when it is free."""
    return running(state_file(home))


def serves(url: str, home: Path | None = None) -> bool:
    """Whether ``url`` is the address of this home's local server (running or not): jobs sent there are
    supervised like the local server's (a dead one is started again, on the same port)."""
    from urllib.parse import urlsplit

    home = home or settings().home
    parts = urlsplit(url.split(";")[0])
    if parts.hostname not in (LOOPBACK, "localhost") or not (home / "connect-server.lock").exists():
        return False
    with locked(home / "connect-server.lock"):  # not while another job replaces it (its file is gone meanwhile)
        path = state_file(home)
        return path.exists() and parts.port == json.loads(path.read_text()).get("port")


def _jobs_dir(home: Path) -> Path:
    return home / "connect-jobs"


def busy(home: Path, besides: Path | None = None) -> list[str]:
    """Run ids of this home's jobs on its local server now (their clients alive), ``besides`` the caller's own."""
    found = []
    for path in _jobs_dir(home).glob("*.job"):
        run_id, pid, _ = path.stem.rsplit("-", 2)
        if path == besides:
            continue
        if pid.isdigit() and alive(int(pid)):
            found.append(run_id)
        else:
            path.unlink(missing_ok=True)
    return sorted(found)


def job_file(home: Path, run_id: str) -> Path:
    """Where a job of this process says it runs on the local server (:func:`connect_server_up` writes it under
    the server's lock, so that no other job replaces the server between its start and the job's session)."""
    return _jobs_dir(home) / f"{run_id}-{os.getpid()}-{uuid.uuid4().hex[:8]}.job"


def connect_server_up(home: Path | None = None, env: Mapping[str, str] | None = None,
                      secrets: tuple[str, ...] = (), job: Path | None = None) -> dict:
    """The local server (started if none runs, or replaced if it runs other settings and is idle).

    ``env``: the caller's environment, ``secrets``: the pipeline's secret variables by name; a busy server
    with other settings is refused with :class:`SparkServerError` naming them. ``job`` (:func:`job_file`):
    written before the lock is let go, so that the server counts as busy with the caller's job from then on
    (the caller removes it when the job ends)."""
    home = home or settings().home
    ours = server_env(env, home)
    digests = job_env_digests(ours, secrets)
    with locked(home / "connect-server.lock"):
        port = _clear_dead(home)
        state = server_state(home)
        if state is not None and _answers(state["port"]):
            differs = differing_settings(digests, state["settings"])
            if not differs:
                left = leftover_daemons(state["pid"])
                if left < recycle_limit() or busy(home, job):
                    return _taken(state, job)
                why = f"{left} Python daemons left by its past jobs (Spark keeps one per query until it stops)"
            else:
                jobs = busy(home, job)
                if jobs:
                    raise SparkServerError("the local Spark Connect server runs with other settings ("
                                           + ", ".join(differs) + f") and is busy with {', '.join(jobs)}")
                why = f"settings differ: {', '.join(differs)}"
        else:
            why = "none running" if state is None else "the one recorded does not answer"
        if state is not None:
            port = state["port"]
            stop_detached(state, state_file(home), grace_s=30.0)
        return _taken(_start(home, ours, digests, why, port), job)


def recycle_limit() -> int:
    """How many leftover Python daemons make an idle local server be replaced (``TAILFILL_CONNECT_RECYCLE_DAEMONS``)."""
    raw = os.environ.get(RECYCLE_ENV, "")
    return int(raw) if raw.isdigit() and int(raw) > 0 else RECYCLE_DAEMONS


def leftover_daemons(server_pid: int, processes: Mapping[int, tuple[int, str]] | None = None) -> int:
    """The Python daemons Spark started for the server (``processes``: pid → (parent, command line), default: this
    machine's): its ``pyspark.daemon`` children (each in a process group of its own), not the workers they fork.
    Each query's planners and executors have theirs, kept after the query ends."""
    procs = _processes() if processes is None else processes
    return sum(1 for ppid, cmd in procs.values() if ppid == server_pid and "pyspark.daemon" in cmd)


def _processes() -> dict[int, tuple[int, str]]:
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        out[int(entry)] = (int(stat.rsplit(")", 1)[1].split()[1]), cmd)  # ppid: after the name, which may hold spaces
    return out


def _taken(state: dict, job: Path | None) -> dict:
    if job is not None:
        job.parent.mkdir(parents=True, exist_ok=True)
        job.touch()
    return state


def _clear_dead(home: Path) -> int | None:
    """Forget a recorded server whose JVM died, and end the Python workers it left behind (its process group);
    returns its port (a new server takes it again, so that an address handed out stays right)."""
    path = state_file(home)
    if not path.exists() or server_state(home) is not None:
        return None
    recorded = json.loads(path.read_text())
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(recorded["pid"], signal.SIGKILL)
    path.unlink(missing_ok=True)
    return recorded.get("port")


def shared_session(home: Path, state: dict, fingerprint: str, closed: str | None = None) -> str:
    """The id of the session this home's jobs share on its local server while they run the same code.

    Spark gives each session its own Python workers (their start and imports are most of a job's startup), so
    jobs that share one reuse the last job's. The id is kept in ``connect-session.json``; a new one is made
    when the server or the code is another, or when the server said it closed ``closed`` (a session nobody
    used for the server's idle timeout ends, and its id cannot be taken again)."""
    key = {"pid": state["pid"], "started_at": state["started_at"], "fingerprint": fingerprint}
    path = home / "connect-session.json"
    with locked(home / "connect-session.lock"):
        try:
            kept = json.loads(path.read_text())
        except (OSError, ValueError):
            kept = {}
        if {k: kept.get(k) for k in key} == key and kept.get("session") not in (None, closed):
            return kept["session"]
        session = str(uuid.uuid4())
        write_whole(path, json.dumps({**key, "session": session}))
        return session


def connect_server_down(home: Path | None = None) -> bool:
    """Stop the local server (queries running on it stop: what they committed stays); True if one ran."""
    home = home or settings().home
    with locked(home / "connect-server.lock"):
        return stop_detached(server_state(home), state_file(home), grace_s=30.0)


def server_command(port: int, python: str | None = None) -> list[str]:
    """``spark-submit`` of Spark's Connect server on loopback ``port`` with Tailfill's Spark settings; ``python``:
    the Python of its Python workers (default: :func:`tailfill.run.runtime.driver_python`)."""
    conf = {
        **runtime.spark_conf(),
        "spark.connect.grpc.binding.address": LOOPBACK,
        "spark.connect.grpc.binding.port": str(port),
        "spark.connect.session.manager.defaultSessionTimeout": SESSION_TIMEOUT,
        "spark.default.parallelism": str(master_cores(runtime.master())),
        "spark.pyspark.python": python or runtime.driver_python(),
        "spark.sql.streaming.stopActiveRunOnRestart": "true",
    }
    cmd = [runtime.spark_submit(), "--class", SERVER_CLASS, "--name", "tailfill-connect",
           "--master", runtime.master(), *runtime.conf_args(conf)]
    return [*cmd, "spark-internal"]


def master_cores(master: str) -> int:
    """Cores of a ``local[N]`` master (``local[*]``: this machine's); 2 for any other."""
    match = re.fullmatch(r"local\[(\d+|\*)(?:,\d+)?\]", master)
    if not match:
        return 2
    return (os.cpu_count() or 2) if match.group(1) == "*" else int(match.group(1))


def _port(kept: int | None) -> int:
    """The port a new server listens on: the last one's (its address stays right) when a server could listen there
    now — its closed connections waiting in TIME_WAIT do not count, as the JVM binds with ``SO_REUSEADDR`` — else a
    free one."""
    return kept if kept and port_free(kept) else free_port()


def _answers(port: int) -> bool:
    try:
        socket.create_connection((LOOPBACK, port), timeout=1.0).close()
        return True
    except OSError:
        return False


def _start(home: Path, env: dict[str, str], digests: dict[str, str | None], why: str, port: int | None) -> dict:
    log_path = home / "logs" / "connect-server.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    workdir = home / "connect-server"  # never a checkout: Spark's Python workers put their folder on sys.path
    workdir.mkdir(parents=True, exist_ok=True)
    port = _port(port)
    started = time.time()
    # The workers' Python, through a launcher that has them import pyspark compiled (the settings compared are
    # the caller's, not this launcher's path).
    python = worker_python(home / "connect-server" / "python", env.get("PYSPARK_PYTHON") or runtime.driver_python(),
                           env)
    env = {**env, "PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python}
    with open(log_path, "ab") as log:
        log.write(f"tailfill: starting the local Spark Connect server ({why})\n".encode())
        log.flush()
        proc = subprocess.Popen(server_command(port, python), env=env, cwd=workdir, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    state = {"pid": proc.pid, "url": f"sc://{LOOPBACK}:{port}", "port": port, "master": runtime.master(),
             "settings": digests, "started_because": why, "started_at": started, "ready_s": None, "log": str(log_path)}
    # Recorded before it answers: a caller killed while it starts leaves a server that the next caller (or
    # `connect-server down`) finds and stops, never one that nobody knows of.
    write_whole(state_file(home), json.dumps(state))
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SparkServerError(f"the local Spark Connect server exited with code {proc.returncode} before "
                                   f"serving (see {log_path})")
        if _answers(port):
            state["ready_s"] = round(time.time() - started, 1)
            write_whole(state_file(home), json.dumps(state))
            return state
        time.sleep(0.2)
    proc.kill()
    raise SparkServerError(f"the local Spark Connect server did not serve within {START_TIMEOUT_S:.0f}s "
                           f"(see {log_path})")
