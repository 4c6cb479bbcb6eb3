"""Tailfill DAGs: for each pipeline YAML in $TAILFILL_PIPELINES (default ./pipelines),
``<pipeline>_backfill`` (manual, params form), ``<pipeline>_incremental`` (scheduled) and, with a
``maintenance:`` block, ``<pipeline>_maintenance`` (scheduled table upkeep).

The DAGs are built by ``plugins/tailfill_airflow/dag_factory.py``; this file stays thin.
"""

from tailfill_airflow.dag_factory import build_dags

globals().update(build_dags())
