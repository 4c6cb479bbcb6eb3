"""Tailfill: Kafka history + live tail into an Iceberg table, exactly once, with the proof.

The core package imports neither Airflow nor a SparkSession; Spark-side code is in
:mod:`tailfill.spark`.
"""

__version__ = "0.1.0"
