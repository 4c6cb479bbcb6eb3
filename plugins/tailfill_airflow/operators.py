"""``TailfillSubmitOperator``: the apache-spark provider's ``SparkSubmitOperator`` for Tailfill's job.

Thin on purpose: the application, Spark settings and code archive come from
:mod:`tailfill.run.runtime`, the arguments from :class:`tailfill.run.submit.JobSpec`, and the
environment (with the Kafka login of the pipeline's Airflow connection) from
:class:`~tailfill_airflow.hooks.TailfillHook` when the task runs.
"""

from __future__ import annotations

from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from tailfill.config import load_pipeline
from tailfill.run import runtime
from tailfill.run.runtime import code_archive_path
from tailfill_airflow.hooks import TailfillHook

__all__ = ["TailfillSubmitOperator", "code_archive_path"]


class TailfillSubmitOperator(SparkSubmitOperator):
    """``spark-submit`` of the ingest job of one pipeline (``pipeline``: the path of its YAML).

    The master is the ``spark_default`` connection's; ``conf`` (optional) is laid over Tailfill's
    Spark settings, as ``tailfill backfill --conf`` does. The tailfill code always goes to the
    executors with ``--py-files``, built by :func:`tailfill.run.runtime.code_archive` when the task runs.
    """

    def __init__(self, *, pipeline: str, conf: dict[str, Any] | None = None, **kwargs: Any):
        kwargs.setdefault("conn_id", "spark_default")
        super().__init__(application=str(runtime.job_file()), conf=runtime.spark_conf() | (conf or {}),
                         py_files=str(code_archive_path()), **kwargs)
        self.pipeline = pipeline

    def execute(self, context: Any) -> None:
        self.py_files = str(runtime.code_archive())  # this worker's code, fresh (the path is the same)
        self.env_vars = {**(self.env_vars or {}), **runtime.shipped_code_env(),
                         **TailfillHook(load_pipeline(self.pipeline)).job_env()}
        return super().execute(context)
