"""Tailfill DAGs: for each pipeline YAML in $TAILFILL_PIPELINES (default ./pipelines),
``<pipeline>_backfill`` (manual, params form) and ``<pipeline>_incremental`` (scheduled).

The DAGs are built by ``plugins/tailfill_airflow/dag_factory.py``; this file stays thin.
"""

from tailfill_airflow.dag_factory import build_dags

globals().update(build_dags())
