"""Which jobs the warm Spark server may run: settings compared as digests, Spark options that need a new app."""

from __future__ import annotations

from pathlib import Path

import pytest

from tailfill.errors import ConfigError
from tailfill.run import runtime, warm_spark


def test_settings_that_reach_a_job_are_compared_by_digest_and_named_when_they_differ():
    server = warm_spark.job_env_digests({"TAILFILL_HOME": "/h", "AWS_REGION": "x", "HOME": "/root"})
    same = warm_spark.job_env_digests({"TAILFILL_HOME": "/h", "AWS_REGION": "x", "PATH": "/bin"})
    assert warm_spark.differing_settings(same, server) == []  # HOME, PATH: not settings of the job
    other = warm_spark.job_env_digests({"TAILFILL_HOME": "/other", "AWS_REGION": "x", "TAILFILL_FAULT_DIR": "/f"})
    assert warm_spark.differing_settings(other, server) == ["TAILFILL_FAULT_DIR", "TAILFILL_HOME"]


def test_a_pipeline_secret_is_compared_without_its_value_and_its_absence_counts():
    job = warm_spark.job_env_digests({"KAFKA_PW": "hunter2"}, extra=("KAFKA_PW",))
    assert "hunter2" not in repr(job)
    assert warm_spark.differing_settings(job, {}) == ["KAFKA_PW"]
    assert warm_spark.differing_settings(job, warm_spark.job_env_digests({"KAFKA_PW": "hunter2"}, ("KAFKA_PW",))) == []


def test_how_to_run_is_not_a_setting_of_the_job():
    assert warm_spark.job_env_digests({"TAILFILL_SPARK": "warm"}) == {}


def test_extra_spark_settings_or_another_master_need_a_new_application():
    assert warm_spark.why_cold(None, None) is None
    assert warm_spark.why_cold(runtime.master(), {}) is None
    assert "spark.executor.memory" in warm_spark.why_cold(None, {"spark.executor.memory": "2g"})
    assert "spark://elsewhere:7077" in warm_spark.why_cold("spark://elsewhere:7077", None)


def test_one_runner_choice_from_the_environment_or_the_caller_and_a_typo_is_named(monkeypatch):
    from tailfill.run.runners import SparkSubmitRunner, WarmFirst, choose_runner

    monkeypatch.setenv("TAILFILL_SPARK", "submit")
    assert isinstance(choose_runner(), SparkSubmitRunner)
    assert isinstance(choose_runner("warm"), WarmFirst)  # the caller's word wins
    monkeypatch.setenv("TAILFILL_SPARK", "warm")
    runner = choose_runner(master="spark://h:7077", conf={"spark.executor.memory": "2g"}, name="app")
    assert isinstance(runner, WarmFirst) and (runner.cold.master, runner.cold.conf) == (
        "spark://h:7077", {"spark.executor.memory": "2g"})
    assert isinstance(choose_runner("submit"), SparkSubmitRunner)
    monkeypatch.setenv("TAILFILL_SPARK", "hot")
    with pytest.raises(ConfigError, match="TAILFILL_SPARK='hot': use auto, connect, warm, submit"):
        choose_runner()


def test_a_job_the_warm_server_cannot_take_runs_cold_saying_why_unless_its_caller_stopped():
    from tailfill.errors import SparkServerError
    from tailfill.run.contract import JobSpec
    from tailfill.run.runners import WarmFirst

    class Cold:
        master, conf = None, {}

        def submit(self, spec, on_line):
            return f"cold {spec.run_id}"

    class Busy:
        def submit(self, spec, on_line):
            raise warm_spark.Refused("the warm Spark server runs other code and is busy")

    spec, said = JobSpec("demo", "tail", "tail-1"), []
    assert WarmFirst(Busy(), Cold()).submit(spec, said.append) == "cold tail-1"
    assert said == ["[tail-1] running cold (spark-submit): the warm Spark server runs other code and is busy"]
    with pytest.raises(SparkServerError, match="its caller has stopped"):
        WarmFirst(Busy(), Cold(), proceed=lambda: False).submit(spec, said.append)
    extra = Cold()
    extra.conf = {"spark.executor.memory": "2g"}  # only a new application takes them: not even asked warm
    assert WarmFirst(Busy(), extra).submit(spec, said.append) == "cold tail-1"
    assert "extra Spark settings asked for (spark.executor.memory)" in said[-1]


def test_the_variables_a_pipeline_yaml_references_are_settings_of_its_job(tmp_path):
    from tailfill.pipeline.load import env_names, load_pipeline

    demo = (Path(__file__).resolve().parents[2] / "pipelines" / "demo.yaml").read_text()
    path = tmp_path / "demo.yaml"
    path.write_text(demo.replace("namespace: tailfill", "namespace: ${MY_NAMESPACE:-tailfill}"))
    names = env_names(load_pipeline(path))
    assert {"MY_NAMESPACE", "TAILFILL_BOOTSTRAP_SERVERS", "TAILFILL_HOME"} <= set(names)
