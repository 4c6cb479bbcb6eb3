"""The spark-submit command line: master, --conf, the tailfill code shipped with --py-files, and the job's
arguments (what every planner writes with ``JobSpec.argv`` and the job reads back with ``JobSpec.parse``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import zipfile
from dataclasses import fields
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailfill.cli import build_parser, main
from tailfill.errors import ConfigError
from tailfill.offsets import PartitionOffsets, TopicPartition
from tailfill.run import runtime
from tailfill.run.contract import (
    IngestResult,
    JobResult,
    JobSpec,
    Slice,
    parse_result,
    parse_together,
    read_event,
    together_argv,
)
from tailfill.run.submit import parse_conf, spark_submit_command

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
    cmd = spark_submit_command(SPEC, "spark://10.0.0.5:7077", conf={"spark.pyspark.python": "/opt/executor/bin/python"})
    conf = dict(c.split("=", 1) for c in _options(cmd, "--conf"))
    assert conf["spark.pyspark.python"] == "/opt/executor/bin/python"
    assert conf["spark.pyspark.driver.python"] == runtime.driver_python() != "/opt/executor/bin/python"


def test_a_local_application_runs_its_python_through_the_launcher_of_this_interpreter():
    conf = dict(c.split("=", 1) for c in _options(spark_submit_command(SPEC, "local[2]"), "--conf"))
    launcher = Path(conf["spark.pyspark.driver.python"])
    assert conf["spark.pyspark.python"] == str(launcher) != runtime.driver_python()
    assert launcher.read_text().rstrip().endswith(f'exec {runtime.driver_python()} "$@"')


def test_every_submit_ships_the_installed_package():
    (archive,) = _options(spark_submit_command(SPEC), "--py-files")
    assert Path(archive) == runtime.code_archive_path()
    names = set(zipfile.ZipFile(archive).namelist())
    package = Path(runtime.__file__).parents[1]
    sources = {str(p.relative_to(package.parent)) for p in package.rglob("*.py")}
    sources |= {"tailfill/spark_jobs/ingest.py", "tailfill/proof/suites/__init__.py"}  # mapped into the package
    assert names >= sources | {name + "c" for name in sources}  # each module with its bytecode beside it
    assert {n for n in names if not n.endswith(".pyc")} == set(runtime.code_modules())
    assert {"tailfill/source/spark_reader.py", "tailfill/run/spark_prepare.py", "tailfill/config.py"} <= names
    assert not list(Path(archive).parent.glob("*.tmp")), "a temporary archive was left behind"


def test_the_archive_is_imported_from_its_bytecode_in_a_fresh_python(tmp_path):
    archive = runtime.code_archive(tmp_path / "code.zip")
    assert runtime.code_archive(tmp_path / "code.zip").stat().st_mtime_ns == archive.stat().st_mtime_ns  # kept
    probe = "import tailfill.lake.prepare as m; print(m.__file__)"
    done = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(archive)!r}); {probe}"],
                          capture_output=True, text=True, check=True)
    assert done.stdout.strip() == f"{archive}/tailfill/lake/prepare.pyc"


def test_the_same_code_makes_the_same_archive_bytes_whenever_it_is_built(tmp_path):
    # A Spark Connect session shared by a home's jobs takes the same archive again, but refuses other bytes under
    # its name: two jobs that each build it (at different moments) must ship identical archives.
    path = tmp_path / "dist" / "code.zip"
    first = runtime.code_archive(path).read_bytes()
    path.unlink()
    time.sleep(2.1)  # zip entries are dated to 2 s
    assert runtime.code_archive(path).read_bytes() == first


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


# Values as planners write them: paths and run ids (never starting with "-", which argparse would read
# as an option), Kafka topic names, any offsets, any counts.
NAMES = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=30).filter(
    lambda s: not s.startswith("-"))
TOPICS = st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-", min_size=1, max_size=12)
COUNTS = st.none() | st.integers(min_value=1, max_value=2**63 - 1)


@st.composite
def slices(draw) -> Slice:
    tps = draw(st.lists(st.builds(TopicPartition, TOPICS, st.integers(0, 10_000)), min_size=1, max_size=6,
                        unique=True))
    starts = [draw(st.integers(0, 2**62)) for _ in tps]
    ends = [start + draw(st.integers(0, 2**40)) for start in starts]
    count = draw(st.integers(1, 64))
    return Slice(draw(st.integers(0, count - 1)), count, PartitionOffsets(dict(zip(tps, starts, strict=True))),
                 PartitionOffsets(dict(zip(tps, ends, strict=True))))


@st.composite
def job_specs(draw) -> JobSpec:
    mode = draw(st.sampled_from(["backfill", "tail"]))
    values = dict(
        pipeline=draw(NAMES), mode=mode, run_id=draw(NAMES),
        slices=tuple(draw(st.lists(slices(), min_size=1, max_size=4))) if mode == "backfill" else (),
        cutover=draw(slices()).end if mode == "tail" else None,
        once=draw(st.booleans()),
        stop_after_seconds=draw(st.none() | st.floats(min_value=0, allow_nan=False, allow_infinity=False)),
        max_offsets_per_batch=draw(COUNTS), max_offsets_per_second=draw(COUNTS))
    # A field added to JobSpec must be drawn here too, or the round trip would never cover it.
    assert set(values) == {f.name for f in fields(JobSpec)}
    return JobSpec(**values)


@settings(max_examples=300, deadline=None)
@given(spec=job_specs())
def test_the_job_reads_back_every_field_a_planner_writes(spec):
    assert JobSpec.parse(spec.argv()) == spec


@settings(max_examples=100, deadline=None)
@given(specs=st.lists(job_specs(), min_size=1, max_size=4))
def test_jobs_run_together_read_back_each_spec(specs):
    assert parse_together(together_argv(specs)) == specs


def test_the_submitter_reads_back_the_results_the_job_prints():
    results = [IngestResult("backfill-1", "demo backfill", batches=3, offsets=900, rows=890, quarantined=10,
                            restarts=1, causes=["InjectedFault: x"], stages={"commit": 0.4}, freshness={"p95": 2.0})]
    lines = ["[demo backfill] 900/900 offsets (100%)", JobResult(results).line() + "\n"]
    assert parse_result(lines).results == results
    assert parse_result(lines[:1]) is None
    together = JobResult(results, run_id="backfill-1")  # one of the jobs an application runs together
    assert read_event(together.line()) == together and read_event(JobResult(results).line()).run_id is None


def test_a_python_that_imports_tailfill_from_the_archive_runs_its_code_and_never_empties_it(tmp_path):
    """A ``spark-submit`` driver (or anything with the archive on its ``PYTHONPATH``) has no package folder: its
    fingerprint is the one its archive was built with, and an archive it is asked for is a copy of its own."""
    archive = runtime.code_archive(tmp_path / "home" / "dist" / "code.zip")
    probe = ("import json, tailfill; from pathlib import Path; from tailfill.run import runtime; "
             f"copy = runtime.code_archive(Path({str(tmp_path / 'copy.zip')!r})); "
             f"same = runtime.code_archive(Path({str(archive)!r})); "
             "print(json.dumps([tailfill.__file__, runtime.code_fingerprint(), str(runtime.running_archive())]))")
    done = subprocess.run([sys.executable, "-c", probe], env={**os.environ, "PYTHONPATH": str(archive)}, cwd=tmp_path,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    imported_from, fingerprint, running = json.loads(done.stdout)
    assert imported_from.startswith(f"{archive}/") and running == str(archive)
    assert fingerprint == runtime.code_fingerprint()  # the code it runs, as the process that built the archive saw it
    with zipfile.ZipFile(archive) as built, zipfile.ZipFile(tmp_path / "copy.zip") as copied:
        assert built.namelist() == copied.namelist() and len(built.namelist()) > 100  # whole, not rebuilt empty
