"""Spark jobs, installed as package data of ``tailfill.spark_jobs`` (see pyproject.toml).

``ingest.py`` is the one job ``spark-submit`` runs; ``log4j2.properties`` quiets the JVM's logging.
"""
