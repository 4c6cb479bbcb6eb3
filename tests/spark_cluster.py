"""A Spark standalone cluster on loopback for tests: one master, N workers, from the pyspark wheel.

    with SparkCluster(tmp / "cluster", workers=2) as cluster:
        tailfill backfill … --master cluster.url --conf spark.pyspark.python=<cluster.executor_python>

Master and workers are ``spark-class org.apache.spark.deploy.{master.Master,worker.Worker}`` with
``SPARK_HOME`` set to the installed pyspark package, bound to 127.0.0.1 on free ports, each in its
own process group. ``executor_python`` is a virtualenv that sees every dependency of tailfill but
not tailfill itself, like a cluster image built from the dependencies only: jobs must ship their
code. At exit every process whose environment carries the cluster's marker (masters, workers,
executors, Python workers) is killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import sysconfig
import time
import urllib.request
from pathlib import Path

import pyspark
from processes import kill_marked

from tailfill.dev.broker import free_port

WORKER_CORES, WORKER_MEMORY = 1, "1g"


def executor_python(folder: Path) -> Path:
    """A Python with tailfill's dependencies (this venv's site-packages) but without tailfill."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    site = next((folder / "lib").glob("python3*/site-packages"))
    # A plain path line: this venv's packages are importable, but its .pth files (tailfill's
    # editable-install finder among them) are not run, so `import tailfill` fails.
    (site / "tailfill-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    python = folder / "bin" / "python"
    probe = subprocess.run([str(python), "-c", "import pyspark, pyarrow, confluent_kafka, pyiceberg, pydantic, yaml\n"
                            "try:\n import tailfill\nexcept ImportError:\n print('ok')"],
                           capture_output=True, text=True, cwd=folder)
    assert probe.stdout.strip() == "ok", f"executor Python is not as intended: {probe.stdout} {probe.stderr}"
    return python


class SparkCluster:
    """Master + ``workers`` workers (1 core, 1 GiB each) on loopback, stopped at exit."""

    def __init__(self, folder: Path, workers: int = 2):
        self.folder = Path(folder).absolute()
        self.port, self.ui_port = free_port(), free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.marker = f"TAILFILL_TEST_SPARK_CLUSTER={self.folder}"
        self.env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON")}
        self.env.update({"SPARK_HOME": str(Path(pyspark.__file__).parent), "SPARK_LOCAL_IP": "127.0.0.1",
                         "SPARK_DAEMON_MEMORY": "256m", "SPARK_LOG_DIR": str(self.folder / "logs"),
                         "TAILFILL_TEST_SPARK_CLUSTER": str(self.folder)})
        self.spark_class = str(Path(sys.executable).parent / "spark-class")
        self.master: subprocess.Popen | None = None
        self.workers: dict[str, subprocess.Popen] = {}
        self.worker_dirs: dict[str, Path] = {}
        self.wanted = workers
        self.executor_python: Path | None = None

    def __enter__(self) -> SparkCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen:
        log = (self.folder / f"{name}.log").open("ab")
        with log:
            return subprocess.Popen([self.spark_class, *args], env=self.env, cwd=self.folder, stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.executor_python = executor_python(self.folder / "executor-venv")
        self.master = self._spawn("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                             "--port", str(self.port), "--webui-port", str(self.ui_port)])
        for i in range(self.wanted):
            self.start_worker(f"worker{i}")
        self.wait_for_workers(self.wanted)

    def start_worker(self, name: str) -> None:
        """Start a worker (again, after :meth:`kill_worker`) with its own work directory."""
        work = self.folder / name
        work.mkdir(exist_ok=True)
        self.worker_dirs[name] = work
        self.workers[name] = self._spawn(name, [
            "org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1", "--port", str(free_port()),
            "--webui-port", str(free_port()), "--cores", str(WORKER_CORES), "--memory", WORKER_MEMORY,
            "--work-dir", str(work)])

    def state(self) -> dict:
        """The master's JSON status (workers, applications)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=10) as resp:
            return json.loads(resp.read())

    def alive_workers(self) -> list[dict]:
        return [w for w in self.state()["workers"] if w["state"] == "ALIVE"]

    def wait_for_workers(self, count: int, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        last = "no answer"
        while True:
            for name, proc in [("master", self.master), *self.workers.items()]:
                if proc is not None and proc.poll() is not None:
                    log = (self.folder / f"{name}.log").read_text(errors="replace")[-3000:]
                    raise RuntimeError(f"spark {name} exited with {proc.returncode}:\n{log}")
            with contextlib.suppress(OSError, ValueError):
                alive = self.alive_workers()
                if len(alive) >= count:
                    return
                last = f"{len(alive)} alive workers"
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Spark cluster has not {count} workers within {timeout:.0f} s ({last})")
            time.sleep(0.5)

    def executors_of(self, name: str) -> list[Path]:
        """The executor folders a worker has made (``<work-dir>/app-…/<executor id>``)."""
        return sorted(p for p in self.worker_dirs[name].glob("app-*/*") if p.is_dir())

    def kill_worker(self, name: str) -> None:
        """SIGKILL a worker's process group: the worker, its executors and their Python workers (a lost machine)."""
        proc = self.workers.pop(name)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)

    def stop(self) -> None:
        for proc in [*self.workers.values(), self.master]:
            if proc is None:
                continue
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        self.workers.clear()
        self.master = None
        left = kill_marked(self.marker.encode())
        if left:
            print(f"killed leftover Spark cluster processes: {left}")
