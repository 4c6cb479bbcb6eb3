"""Airflow plugin of Tailfill: its pages (``/tailfill``) and their tabs in the Airflow UI, and the listener that
writes a failed task's cause and fix as its note (:mod:`tailfill_airflow.failure_notes`).

Loaded by Airflow from the plugins folder; the pages are :mod:`tailfill_airflow.views`.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin
from tailfill_airflow import failure_notes
from tailfill_airflow.views import app


class TailfillPlugin(AirflowPlugin):
    name = "tailfill"
    listeners = [failure_notes]  # noqa: RUF012 (Airflow API): failed tasks' causes as their notes
    fastapi_apps = [{"app": app, "url_prefix": "/tailfill", "name": "Tailfill"}]  # noqa: RUF012 (Airflow API)
    external_views = [  # noqa: RUF012 (Airflow reads and prunes this list)
        {"name": "Tailfill", "href": "/tailfill/run/{DAG_ID}/{RUN_ID}", "destination": "dag_run",
         "url_route": "tailfill_run"},
        {"name": "Tailfill", "href": "/tailfill/batches/{DAG_ID}/{RUN_ID}/{MAP_INDEX}",
         "destination": "task_instance", "url_route": "tailfill_lane"},
    ]

