"""The Kafka login of an Airflow connection reaches every consumer: the Spark job's and the worker's.

The connection is a real Airflow connection (``AIRFLOW_CONN_*``, read by Airflow's own secrets
backend); the job is a separate process that sees only the environment the operator gives
``spark-submit``, and builds its consumer settings exactly as the Spark job does.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "plugins"))
from tailfill_airflow.hooks import TailfillHook  # noqa: E402

from tailfill.errors import ConfigError  # noqa: E402
from tailfill.pipeline.load import load_pipeline  # noqa: E402
from tailfill.source.kafka import consumer_config  # noqa: E402

JOB_SIDE = """
import json, sys
from tailfill.pipeline.load import load_pipeline
from tailfill.source.kafka import consumer_config
conf = consumer_config(load_pipeline(sys.argv[1]).source)
print(json.dumps({k: conf.get(k) for k in ("security.protocol", "sasl.mechanism", "sasl.username", "sasl.password")}))
"""


@pytest.fixture
def sasl_pipeline(tmp_path, monkeypatch):
    """The demo pipeline on SASL/SCRAM whose login is the Airflow connection ``kafka_test`` (no *_env names)."""
    monkeypatch.setenv("TAILFILL_HOME", str(tmp_path / "home"))
    data = yaml.safe_load((REPO / "pipelines" / "demo.yaml").read_text())
    data["source"]["bootstrap_servers"] = "127.0.0.1:9"
    data["source"]["security"] = {"protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-512",
                                  "airflow_conn_id": "kafka_test"}
    path = tmp_path / "sasl.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_pipeline(path)


def test_the_connection_s_login_reaches_the_spark_job_s_consumer(sasl_pipeline, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_TEST", json.dumps({"conn_type": "generic", "login": "alice",
                                                              "password": "s3cret"}))
    env = TailfillHook(sasl_pipeline).job_env()  # what TailfillSubmitOperator hands spark-submit
    assert "AIRFLOW_CONN_KAFKA_TEST" not in env
    out = subprocess.run([sys.executable, "-c", JOB_SIDE, str(sasl_pipeline.path)], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
                                      "sasl.username": "alice", "sasl.password": "s3cret"}


def test_worker_side_tasks_see_the_login_only_while_they_run(sasl_pipeline, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_TEST", json.dumps({"conn_type": "generic", "login": "alice",
                                                              "password": "s3cret"}))
    with pytest.raises(ConfigError, match=r"TAILFILL_KAFKA_USERNAME .*Airflow connection 'kafka_test'"):
        consumer_config(sasl_pipeline.source)  # outside the hook: a clear error, not an anonymous login
    with TailfillHook(sasl_pipeline).credentials_exported():
        conf = consumer_config(sasl_pipeline.source)
    assert (conf["sasl.username"], conf["sasl.password"]) == ("alice", "s3cret")
    assert "TAILFILL_KAFKA_USERNAME" not in os.environ and "TAILFILL_KAFKA_PASSWORD" not in os.environ


def test_a_connection_without_a_password_is_named(sasl_pipeline, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_TEST", json.dumps({"conn_type": "generic", "login": "alice"}))
    with pytest.raises(ConfigError, match=r"connection 'kafka_test'.*needs a login and a password"):
        TailfillHook(sasl_pipeline).job_env()


def test_the_hook_names_its_connection_like_the_spark_provider(sasl_pipeline):
    hook = TailfillHook(sasl_pipeline)
    assert getattr(hook, TailfillHook.conn_name_attr) == "kafka_test"
    assert TailfillHook(sasl_pipeline, kafka_conn_id="other").kafka_conn_id == "other"


def test_every_secret_the_hook_hands_a_job_is_masked_in_airflow_s_logs(sasl_pipeline, tmp_path, monkeypatch):
    """The connection's password, S3's secret key and the catalog URI's password, as Airflow's masker sees them."""
    from airflow.sdk._shared.secrets_masker.secrets_masker import redact

    kafka, s3, catalog = (f"{kind}-{uuid.uuid4().hex}" for kind in ("kafka", "s3", "catalog"))
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_TEST", json.dumps({"conn_type": "generic", "login": "alice",
                                                              "password": kafka}))
    data = yaml.safe_load(Path(sasl_pipeline.path).read_text())
    data["target"]["warehouse"] = "s3://tailfill/w"
    data["target"]["s3"] = {"endpoint": "http://127.0.0.1:9", "secret_key_env": "TEST_S3_SECRET"}
    data["target"]["catalog"]["uri"] = "${TAILFILL_CATALOG_URI:-sqlite:////tmp/none.db}"
    path = tmp_path / "s3.yaml"
    path.write_text(yaml.safe_dump(data))
    cfg = load_pipeline(path)  # parsed before the worker's environment holds the secrets
    monkeypatch.setenv("TEST_S3_SECRET", s3)
    monkeypatch.setenv("TAILFILL_CATALOG_URI", f"postgresql+psycopg2://tailfill:{catalog}@db:5432/iceberg")
    env = TailfillHook(cfg).job_env()
    assert (env["TEST_S3_SECRET"], env["TAILFILL_KAFKA_PASSWORD"]) == (s3, kafka)
    line = f"catalog postgresql+psycopg2://tailfill:{catalog}@db:5432/iceberg, s3 {s3}, kafka alice/{kafka}"
    assert redact(line) == "catalog postgresql+psycopg2://tailfill:***@db:5432/iceberg, s3 ***, kafka alice/***"


def test_the_spark_job_s_output_reaches_the_task_log_and_its_file_redacted(sasl_pipeline, tmp_path):
    """The runner hands every line of the job to the operator's public callback: the whole output goes to the
    output file, the job's own lines to the task log, every secret masked."""
    from tailfill_airflow.causes import JobOutput
    from tailfill_airflow.operators import TailfillSubmitOperator

    from tailfill.errors import ErrorInfo, LakeError
    from tailfill.run.contract import JobResult

    op = TailfillSubmitOperator(task_id="tail", pipeline=str(sasl_pipeline.path), application_args=[])
    op._output, op._output_file = JobOutput(), tmp_path / "spark-submit-try1.log"
    cause = "cannot open the Iceberg catalog at postgresql+psycopg2://u:pw-in-uri@127.0.0.1:9/none: refused"
    job = ["26/11/24 01:00:00 INFO SparkContext: Running Spark version 4.2.0", f"error: {cause}",
           JobResult(error=ErrorInfo.of(LakeError(cause))).line()]
    with op._output_file.open("w") as op._out:
        shown = [line for line in job if op.observe_line(line)]
    redacted = "cannot open the Iceberg catalog at postgresql+psycopg2://u:***@127.0.0.1:9/none: refused"
    assert shown == job[1:]
    assert op._output.cause == redacted and op._output.result.error.error_class == "LakeError"
    written = op._output_file.read_text().splitlines()
    assert written[:2] == [job[0], f"error: {redacted}"] and "pw-in-uri" not in "".join(written)


def test_the_spark_master_is_the_connection_s_as_the_spark_provider_reads_it(sasl_pipeline, monkeypatch):
    from tailfill.run import runtime

    hook = TailfillHook(sasl_pipeline)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    assert hook.spark_master() == "local[2]"  # a whole master URL in its host (the UI's way)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", "spark://spark-master:7077")  # compose's URI
    assert hook.spark_master() == "spark://spark-master:7077"
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_K8S", json.dumps({"conn_type": "spark", "host": "k8s://https://k:443"}))
    assert hook.spark_master("spark_k8s") == "k8s://https://k:443"
    assert hook.spark_master("spark_nowhere") == runtime.master()  # no connection: Tailfill's own default


def test_a_lane_that_will_be_retried_keeps_its_label(monkeypatch):
    """Airflow's retry message carries no rendered map index, so without the wrapper the grid shows
    ``ingest_slice [0]`` between tries. Pins the task runner's private function the wrapper wraps."""
    import inspect
    from types import SimpleNamespace

    from airflow.sdk.execution_time import task_runner
    from tailfill_airflow.retry_label import keep_label_on_retry

    monkeypatch.setattr(task_runner, "_finalize_task_failure", task_runner._finalize_task_failure)  # undone after
    assert "_finalize_task_failure(" in inspect.getsource(task_runner._handle_current_task_failed)
    keep_label_on_retry()
    keep_label_on_retry()  # twice: wrapped once
    label = "slice 1 of 3 (1,334 offsets)"
    ti = SimpleNamespace(rendered_map_index=label, end_date=None, _failure_metrics_emitted=True,
                         _ti_context_from_server=SimpleNamespace(should_retry=True))
    msg, state = task_runner._finalize_task_failure(ti)
    assert (state, msg.rendered_map_index) == ("up_for_retry", label)
    ti._ti_context_from_server.should_retry = False  # the last try: Airflow's own message keeps it already
    msg, state = task_runner._finalize_task_failure(ti)
    assert (state, msg.rendered_map_index) == ("failed", label)


def test_the_schema_registry_login_of_a_connection_reaches_the_job_s_registry_client(tmp_path, monkeypatch):
    monkeypatch.setenv("TAILFILL_HOME", str(tmp_path / "home"))
    data = yaml.safe_load((REPO / "pipelines" / "orders_avro.yaml").read_text())
    data["format"]["schema_registry"] = {"url": "http://127.0.0.1:9", "airflow_conn_id": "registry_test"}
    path = tmp_path / "avro.yaml"
    path.write_text(yaml.safe_dump(data))
    monkeypatch.setenv("AIRFLOW_CONN_REGISTRY_TEST", json.dumps({"conn_type": "generic", "login": "bob",
                                                                 "password": "sr-s3cret"}))
    env = TailfillHook(load_pipeline(path)).job_env()
    job_side = ("import sys; from tailfill.pipeline.load import load_pipeline; "
                "from tailfill.formats.schema_registry import RegistryClient; "
                "print(RegistryClient(load_pipeline(sys.argv[1]).format.schema_registry).auth)")
    out = subprocess.run([sys.executable, "-c", job_side, str(path)], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "Basic " + base64.b64encode(b"bob:sr-s3cret").decode()
