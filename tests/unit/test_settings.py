"""The environment's settings: read in one place, typed, and a bad value named with its fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from tailfill.errors import ConfigError
from tailfill.settings import settings


def test_defaults_when_nothing_is_set():
    s = settings({})
    assert (s.home, s.pipelines) == (Path(".tailfill").absolute(), Path("pipelines").absolute())
    assert (s.spark_mode, s.spark_master, s.spark_driver_host, s.spark_slots) == ("auto", "local[2]", "127.0.0.1", 4)
    assert (s.fault_dir, s.fault_skip, s.broker_port, s.on_failure) == (None, 0, None, None)
    assert s.airflow_preload is True


def test_every_variable_is_read_into_its_field():
    s = settings({"TAILFILL_HOME": "/h", "TAILFILL_SPARK": "connect", "TAILFILL_SPARK_MASTER": "spark://m:7077",
                  "TAILFILL_SPARK_SLOTS": "6", "TAILFILL_FAULT_DIR": "/f", "TAILFILL_FAULT_SKIP": "2",
                  "TAILFILL_BROKER_PORT": "9092", "TAILFILL_JARS_DIR": "/j", "TAILFILL_ON_FAILURE": "m:f"})
    assert (s.home, s.spark_mode, s.spark_master, s.spark_slots) == (Path("/h"), "connect", "spark://m:7077", 6)
    assert (s.fault_dir, s.fault_skip, s.broker_port, s.on_failure) == (Path("/f"), 2, 9092, "m:f")
    assert s.jars_dir == Path("/j") and settings({"HOME": "/u"}).jars_dir == Path("/u/.cache/tailfill/jars")
    assert settings({"TAILFILL_AIRFLOW_PRELOAD": "0"}).airflow_preload is False
    assert settings({"TAILFILL_BOUNDED_RUNS": "query"}).bounded_as_query and not settings({}).bounded_as_query


@pytest.mark.parametrize(("name", "value", "says"), [
    ("TAILFILL_SPARK", "hot", "TAILFILL_SPARK='hot': use auto, connect, submit"),
    ("TAILFILL_SPARK", "warm", "TAILFILL_SPARK='warm': the warm Spark server was removed, Spark Connect replaces it: "
                               "use connect (the modes: auto, connect, submit)"),
    ("TAILFILL_SPARK_REMOTE", "127.0.0.1:15002", "TAILFILL_SPARK_REMOTE='127.0.0.1:15002': not a Spark Connect "),
    ("TAILFILL_SPARK_SLOTS", "1", "TAILFILL_SPARK_SLOTS='1': the Spark pool needs at least 2 slots (fix: "),
    ("TAILFILL_BROKER_PORT", "ninety", "TAILFILL_BROKER_PORT='ninety': not a whole number (fix: "),
    ("TAILFILL_AIRFLOW_PRELOAD", "yes", "TAILFILL_AIRFLOW_PRELOAD='yes': use one of 0, 1 (or unset it)"),
    ("TAILFILL_BOUNDED_RUNS", "stream", "TAILFILL_BOUNDED_RUNS='stream': use one of direct, query (or unset it)"),
])
def test_a_bad_value_is_one_line_naming_the_variable(name, value, says):
    with pytest.raises(ConfigError) as err:
        settings({name: value})
    assert str(err.value).startswith(says) and "\n" not in str(err.value)


def test_no_module_reads_a_tailfill_variable_but_the_settings():
    """``TAILFILL_*`` variables are read in one place (names of variables that hold secrets are no reads)."""
    import re

    repo = Path(__file__).resolve().parents[2]
    reads = re.compile(r"""(?:environ(?:\.get)?|getenv)\(?\s*\[?\s*["']TAILFILL_""")
    offenders = [str(p.relative_to(repo)) for folder in ("tailfill", "plugins") for p in (repo / folder).rglob("*.py")
                 if p.name != "settings.py" and reads.search(p.read_text())]
    assert offenders == []
