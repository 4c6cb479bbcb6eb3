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


def test_the_mode_comes_from_the_environment_and_a_typo_is_named(monkeypatch):
    monkeypatch.delenv("TAILFILL_SPARK", raising=False)
    assert warm_spark.default_mode() == "submit"
    monkeypatch.setenv("TAILFILL_SPARK", "warm")
    assert warm_spark.default_mode() == "warm"
    monkeypatch.setenv("TAILFILL_SPARK", "hot")
    with pytest.raises(ConfigError, match="TAILFILL_SPARK='hot': use warm or submit"):
        warm_spark.default_mode()


def test_the_variables_a_pipeline_yaml_references_are_settings_of_its_job(tmp_path):
    from tailfill.pipeline.load import env_names, load_pipeline

    demo = (Path(__file__).resolve().parents[2] / "pipelines" / "demo.yaml").read_text()
    path = tmp_path / "demo.yaml"
    path.write_text(demo.replace("namespace: tailfill", "namespace: ${MY_NAMESPACE:-tailfill}"))
    names = env_names(load_pipeline(path))
    assert {"MY_NAMESPACE", "TAILFILL_BOOTSTRAP_SERVERS", "TAILFILL_HOME"} <= set(names)
