"""Spark-side code: the Kafka data source, the Iceberg sink and the ingest runner (no Airflow here)."""
