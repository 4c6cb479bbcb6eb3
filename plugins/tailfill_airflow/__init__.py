"""Airflow corner of tailfill: a hook that owns connections and environment, and the DAG factory.

Everything here is thin: the work is done by the ``tailfill`` core and the Spark job.
"""
