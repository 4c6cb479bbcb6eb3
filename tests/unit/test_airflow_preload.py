"""The local Airflow's scheduler imports the task modules before it forks the task processes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "plugins"))
from tailfill_airflow.local import component_command  # noqa: E402
from tailfill_airflow.preload import TASK_MODULES  # noqa: E402


def _python(code: str, airflow_home: Path) -> list[str]:
    """``code`` run by a fresh interpreter with the plugins importable; its output lines."""
    env = {"PYTHONPATH": f"{REPO / 'plugins'}:{REPO}", "PATH": "/usr/bin:/bin", "AIRFLOW_HOME": str(airflow_home)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env=env).stdout.splitlines()


def test_only_the_scheduler_is_started_through_the_preload_and_only_when_asked():
    scheduler = ["scheduler", "--skip-serve-logs"]
    assert component_command("/bin/airflow", scheduler, preload=True) == [
        sys.executable, "-m", "tailfill_airflow.preload", "scheduler", "--skip-serve-logs"]
    assert component_command("/bin/airflow", scheduler, preload=False) == ["/bin/airflow", *scheduler]
    assert component_command("/bin/airflow", ["dag-processor"], preload=True) == ["/bin/airflow", "dag-processor"]


def test_a_module_that_does_not_import_is_named_and_the_others_are_loaded(tmp_path):
    out = _python("import sys; from tailfill_airflow.preload import preload; "
                  "print(preload(('json', 'no_such_module_xyz', 'tailfill.offsets'))); "
                  "print('tailfill.offsets' in sys.modules, 'json' in sys.modules)", tmp_path)
    assert out == ["[\"no_such_module_xyz: ModuleNotFoundError: No module named 'no_such_module_xyz'\"]", "True True"]


def test_every_task_module_imports_and_starts_no_thread_before_the_fork(tmp_path):
    out = _python("import sys, threading; from tailfill_airflow.preload import TASK_MODULES, preload; "
                  "print(preload()); print(threading.active_count()); "
                  "print(all(m in sys.modules for m in TASK_MODULES))", tmp_path)
    assert out == ["[]", "1", "True"], f"preloading {TASK_MODULES}: {out}"


def test_a_logger_a_module_switched_off_stays_silent_after_a_logging_setup_that_switches_loggers_on(tmp_path):
    """pyspark's Spark Connect client logger is off unless asked for; preloaded before Airflow's logging setup
    (which switches every existing logger back on), its errors must not reach a task's log, as before."""
    out = _python(
        "import logging, logging.config, sys; from tailfill_airflow.preload import preload; "
        "print(preload(('pyspark.sql.connect.logging',))); "
        "logging.config.dictConfig({'version': 1, 'disable_existing_loggers': False, 'handlers': {'out': "
        "{'class': 'logging.StreamHandler', 'stream': 'ext://sys.stdout'}}, 'root': {'level': 'INFO', "
        "'handlers': ['out']}}); "
        "logging.getLogger('pyspark.sql.connect.logging').error('from the Connect client'); "
        "logging.getLogger('tailfill').error('from Tailfill')", tmp_path)
    assert out == ["[]", "from Tailfill"]
