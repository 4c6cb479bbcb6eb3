"""The spark-submit command line: master, --conf, and the tailfill code shipped with --py-files."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from tailfill.cli import build_parser, main
from tailfill.errors import ConfigError
from tailfill.run import runtime
from tailfill.run.submit import JobSpec, parse_conf, spark_submit_command

SPEC = JobSpec("demo", "tail", "tail-1", once=True)


def _options(cmd: list[str], name: str) -> list[str]:
    return [cmd[i + 1] for i, word in enumerate(cmd) if word == name]


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("TAILFILL_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("TAILFILL_SPARK_MASTER", raising=False)


def test_master_and_conf_reach_spark_submit_over_the_defaults():
    cmd = spark_submit_command(SPEC, "spark://127.0.0.1:7077",
                               {"spark.executor.memory": "2g", "spark.sql.shuffle.partitions": "16"})
    assert _options(cmd, "--master") == ["spark://127.0.0.1:7077"]
    conf = dict(c.split("=", 1) for c in _options(cmd, "--conf"))
    assert conf["spark.executor.memory"] == "2g"
    assert conf["spark.sql.shuffle.partitions"] == "16"  # the user's value wins over Tailfill's 4
    assert conf["spark.driver.host"] == "127.0.0.1"
    assert cmd[-len(SPEC.argv()):] == SPEC.argv()


def test_master_defaults_to_the_environment(monkeypatch):
    assert _options(spark_submit_command(SPEC), "--master") == ["local[2]"]
    monkeypatch.setenv("TAILFILL_SPARK_MASTER", "spark://10.0.0.5:7077")
    assert _options(spark_submit_command(SPEC), "--master") == ["spark://10.0.0.5:7077"]


def test_executor_python_from_conf_does_not_move_the_driver():
    cmd = spark_submit_command(SPEC, conf={"spark.pyspark.python": "/opt/executor/bin/python"})
    conf = dict(c.split("=", 1) for c in _options(cmd, "--conf"))
    assert conf["spark.pyspark.python"] == "/opt/executor/bin/python"
    assert conf["spark.pyspark.driver.python"] == runtime.driver_python() != "/opt/executor/bin/python"


def test_every_submit_ships_the_installed_package():
    (archive,) = _options(spark_submit_command(SPEC), "--py-files")
    assert Path(archive) == runtime.code_archive_path()
    names = set(zipfile.ZipFile(archive).namelist())
    package = Path(runtime.__file__).parents[1]
    expected = {str(p.relative_to(package.parent)) for p in package.rglob("*.py")}
    assert names == expected
    assert {"tailfill/source/spark_reader.py", "tailfill/lake/spark_writer.py", "tailfill/config.py"} <= names
    assert not list(Path(archive).parent.glob("*.tmp")), "a temporary archive was left behind"


@pytest.mark.parametrize("bad", ["spark.executor.memory", "=2g", " spark.x=1"])
def test_malformed_conf_is_a_one_line_error(bad):
    with pytest.raises(ConfigError, match=r"expected KEY=VALUE"):
        parse_conf([bad])


def test_conf_values_may_hold_equals_signs():
    assert parse_conf(["spark.driver.extraJavaOptions=-Da=b -Dc=d"]) == {
        "spark.driver.extraJavaOptions": "-Da=b -Dc=d"}


def test_cli_takes_master_and_repeated_conf():
    args = build_parser().parse_args(["backfill", "demo", "--master", "spark://h:7077",
                                      "--conf", "a.b=1", "--conf", "c.d=2"])
    assert (args.master, args.conf) == ("spark://h:7077", ["a.b=1", "c.d=2"])
    args = build_parser().parse_args(["tail", "demo", "--once", "--conf", "spark.pyspark.python=/x/python"])
    assert (args.master, args.conf) == (None, ["spark.pyspark.python=/x/python"])


def test_cli_rejects_a_malformed_conf_before_doing_anything(capsys):
    assert main(["tail", "demo", "--once", "--conf", "spark.executor.memory"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --conf 'spark.executor.memory': expected KEY=VALUE"), err
    assert len(err.splitlines()) == 1
