"""``TailfillSubmitOperator``: the apache-spark provider's ``SparkSubmitOperator`` for Tailfill's job.

Thin on purpose: the application, Spark settings and code archive come from
:mod:`tailfill.run.runtime`, the arguments from :class:`tailfill.run.submit.JobSpec`, and the
environment (with the Kafka login of the pipeline's Airflow connection) from
:class:`~tailfill_airflow.hooks.TailfillHook` when the task runs.
"""

from __future__ import annotations

from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

import tailfill
from tailfill.config import load_pipeline, tailfill_home
from tailfill.run import runtime
from tailfill_airflow.hooks import TailfillHook


def code_archive_path():
    return tailfill_home() / "dist" / f"tailfill-{tailfill.__version__}.zip"


class TailfillSubmitOperator(SparkSubmitOperator):
    """``spark-submit`` of the ingest job of one pipeline (``pipeline``: the path of its YAML)."""

    def __init__(self, *, pipeline: str, **kwargs: Any):
        kwargs.setdefault("conn_id", "spark_default")
        super().__init__(application=str(runtime.job_file()), conf=runtime.spark_conf(),
                         py_files=str(code_archive_path()), **kwargs)
        self.pipeline = pipeline

    def execute(self, context: Any) -> None:
        self.env_vars = {**(self.env_vars or {}), **TailfillHook(load_pipeline(self.pipeline)).job_env()}
        return super().execute(context)
