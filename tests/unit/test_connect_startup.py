"""The local Connect server's worker launcher (pyspark compiled, not Spark's zip) and the preloaded foreachBatch."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tailfill.run.server_settings import job_env_digests
from tailfill.run.spark_connect_code import Code, ShippedForeachBatch
from tailfill.run.worker_python import (
    KEEP_ZIP_ENV,
    Installed,
    dropped_entries,
    filtered_path,
    installed,
    launcher_script,
    worker_python,
)

FOUND = Installed("/site/pyspark", "0.10.9.9")
ZIP, PY4J, JAR = ("/site/pyspark/python/lib/pyspark.zip", "/site/pyspark/python/lib/py4j-0.10.9.9-src.zip",
                  "/site/pyspark/jars/spark-core.jar")


def test_dropped_entries_name_pysparks_zip_and_py4js_of_the_installed_version():
    assert dropped_entries(FOUND) == ("python/lib/pyspark.zip", "python/lib/py4j-0.10.9.9-src.zip")
    assert dropped_entries(Installed("/site/pyspark", None)) == ("python/lib/pyspark.zip",)


def test_filtered_path_drops_the_zips_only_under_the_installed_pysparks_spark_home():
    path = f"{ZIP}:{PY4J}:{JAR}:/user/code"
    assert filtered_path(path, "/site/pyspark", "/site/pyspark", FOUND) == f"{JAR}:/user/code"
    assert filtered_path(path, "/opt/spark", "/opt/spark", FOUND) == path  # a Spark distribution: unchanged
    other_py4j = "/site/pyspark/python/lib/py4j-0.10.9.7-src.zip"
    assert filtered_path(f"{ZIP}:{other_py4j}", "/site/pyspark", "/site/pyspark", FOUND) == other_py4j


def _run_launcher(tmp_path: Path, pyspark_dir: Path, spark_home: str, python_path: str | None) -> str | None:
    found = Installed(str(pyspark_dir.resolve()), "0.10.9.9")
    script = tmp_path / "python"
    script.write_text(launcher_script(sys.executable, found))
    script.chmod(0o755)
    env = {"PATH": os.environ.get("PATH", ""), "SPARK_HOME": spark_home}
    if python_path is not None:
        env["PYTHONPATH"] = python_path
    out = subprocess.run([str(script), "-c", "import os; print(os.environ.get('PYTHONPATH', '<unset>'))"],
                         env=env, capture_output=True, text=True, check=True).stdout.strip()
    return None if out == "<unset>" else out


def test_launcher_does_what_filtered_path_says(tmp_path):
    home = tmp_path / "pyspark dir"  # a space in the path
    home.mkdir()
    h = str(home)
    path = f"{h}/python/lib/pyspark.zip:{h}/python/lib/py4j-0.10.9.9-src.zip:{h}/jars/core.jar:/x/*"
    assert _run_launcher(tmp_path, home, h, path) == f"{h}/jars/core.jar:/x/*"
    assert _run_launcher(tmp_path, home, h, f"{h}/python/lib/pyspark.zip") is None
    assert _run_launcher(tmp_path, home, h, None) is None
    other = tmp_path / "other"
    other.mkdir()
    unchanged = f"{other}/python/lib/pyspark.zip:/x"
    assert _run_launcher(tmp_path, home, str(other), unchanged) == unchanged  # another SPARK_HOME: left as it is


def test_installed_finds_this_pythons_pyspark():
    import pyspark

    found = installed(sys.executable)
    assert found is not None and found.pyspark_dir == os.path.realpath(os.path.dirname(pyspark.__file__))
    assert installed(str(Path(sys.executable).parent / "no-such-python")) is None


def test_worker_python_is_the_python_itself_when_asked_to_keep_the_zip(tmp_path):
    assert worker_python(tmp_path / "python", sys.executable, {KEEP_ZIP_ENV: "1"}) == sys.executable
    launcher = worker_python(tmp_path / "python", sys.executable, {})
    assert launcher == str(tmp_path / "python") and os.access(launcher, os.X_OK)
    assert worker_python(tmp_path / "python", sys.executable, {}) == launcher  # kept as it is


def test_client_side_switches_are_not_server_settings():
    assert "TAILFILL_CONNECT_PRELOAD" not in job_env_digests({"TAILFILL_CONNECT_PRELOAD": "0"})
    assert "TAILFILL_BOUNDED_RUNS" not in job_env_digests({"TAILFILL_BOUNDED_RUNS": "query"})
    assert KEEP_ZIP_ENV in job_env_digests({KEEP_ZIP_ENV: "1"})  # the server's workers change with it


class Recorder:
    warmed = 0

    def warm(self):
        type(self).warmed += 1

    def __call__(self, df, batch_id):
        return (df, batch_id)


class Broken:
    def __reduce__(self):
        return (_fail, ())


def _fail():
    raise ValueError("cannot load")


@pytest.fixture
def code(tmp_path):
    archive = tmp_path / "tailfill-x.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.comment = b"x"
        zf.writestr("marker.txt", "")
    return Code(archive)


def test_shipped_foreach_batch_loads_and_warms_its_function_when_unpickled(code):
    Recorder.warmed = 0
    shipped = pickle.loads(pickle.dumps(ShippedForeachBatch(code, Recorder())))
    assert shipped(1, 7) == (1, 7) and shipped(2, 8) == (2, 8)
    assert Recorder.warmed == 1


def test_shipped_foreach_batch_without_preload_loads_on_the_first_batch(code):
    Recorder.warmed = 0
    shipped = pickle.loads(pickle.dumps(ShippedForeachBatch(code, Recorder(), preload=False)))
    assert shipped._loading is None
    assert shipped(1, 7) == (1, 7) and Recorder.warmed == 0


def test_a_load_that_failed_in_the_background_fails_the_first_batch_with_its_error(code):
    shipped = pickle.loads(pickle.dumps(ShippedForeachBatch(code, Broken())))
    with pytest.raises(ValueError, match="cannot load"):
        shipped(1, 0)


def test_the_daemons_a_server_left_are_its_daemon_children_not_their_workers_nor_other_servers(monkeypatch):
    from tailfill.run.connect_server import RECYCLE_DAEMONS, RECYCLE_ENV, leftover_daemons, recycle_limit

    planner = "python -m pyspark.daemon pyspark.sql.worker.plan_data_source_read"
    procs = {100: (1, "java -cp … org.apache.spark.deploy.SparkSubmit --class SparkConnectServer"),
             101: (100, planner), 102: (101, planner),  # a daemon and the worker it forked
             103: (100, "python -m pyspark.daemon pyspark.worker"),
             104: (100, "python -m pyspark.sql.connect.streaming.worker.foreach_batch_worker"),
             200: (1, "java … SparkConnectServer"), 201: (200, "python -m pyspark.daemon")}  # another server's
    assert leftover_daemons(100, procs) == 2 and leftover_daemons(200, procs) == 1
    assert leftover_daemons(os.getpid()) == 0  # this machine's processes, read from /proc
    assert recycle_limit() == RECYCLE_DAEMONS
    monkeypatch.setenv(RECYCLE_ENV, "3")
    assert recycle_limit() == 3
    assert RECYCLE_ENV not in job_env_digests({RECYCLE_ENV: "3"})  # not a setting: it never replaces a busy one
