"""Which jobs a long-lived Spark server may run: settings compared as digests, Spark options that need a new
application (:mod:`tailfill.run.server_settings`, :func:`tailfill.run.runners.why_submit`)."""

from __future__ import annotations

from pathlib import Path

from tailfill.run import runtime
from tailfill.run.runners import why_submit
from tailfill.run.server_settings import differing_settings, job_env_digests


def test_settings_that_reach_a_job_are_compared_by_digest_and_named_when_they_differ():
    server = job_env_digests({"TAILFILL_HOME": "/h", "AWS_REGION": "x", "HOME": "/root"})
    same = job_env_digests({"TAILFILL_HOME": "/h", "AWS_REGION": "x", "PATH": "/bin"})
    assert differing_settings(same, server) == []  # HOME, PATH: not settings of the job
    other = job_env_digests({"TAILFILL_HOME": "/other", "AWS_REGION": "x", "TAILFILL_FAULT_DIR": "/f"})
    assert differing_settings(other, server) == ["TAILFILL_FAULT_DIR", "TAILFILL_HOME"]


def test_a_pipeline_secret_is_compared_without_its_value_and_its_absence_counts():
    job = job_env_digests({"KAFKA_PW": "hunter2"}, extra=("KAFKA_PW",))
    assert "hunter2" not in repr(job)
    assert differing_settings(job, {}) == ["KAFKA_PW"]
    assert differing_settings(job, job_env_digests({"KAFKA_PW": "hunter2"}, ("KAFKA_PW",))) == []


def test_how_to_run_is_not_a_setting_of_the_job():
    assert job_env_digests({"TAILFILL_SPARK": "connect", "TAILFILL_SPARK_REMOTE": "sc://h:1"}) == {}
    assert job_env_digests({"TAILFILL_CLASS_ARCHIVE_DIR": "off"}) == {}  # how a JVM starts, not what a job does


def test_extra_spark_settings_or_another_master_need_a_new_application():
    assert why_submit(None, None) is None
    assert why_submit(runtime.master(), {}) is None
    assert "spark.executor.memory" in why_submit(None, {"spark.executor.memory": "2g"})
    assert "spark://elsewhere:7077" in why_submit("spark://elsewhere:7077", None)


def test_the_variables_a_pipeline_yaml_references_are_settings_of_its_job(tmp_path):
    from tailfill.pipeline.load import env_names, load_pipeline

    demo = (Path(__file__).resolve().parents[2] / "pipelines" / "demo.yaml").read_text()
    path = tmp_path / "demo.yaml"
    path.write_text(demo.replace("namespace: tailfill", "namespace: ${MY_NAMESPACE:-tailfill}"))
    names = env_names(load_pipeline(path))
    assert {"MY_NAMESPACE", "TAILFILL_BOOTSTRAP_SERVERS", "TAILFILL_HOME"} <= set(names)
