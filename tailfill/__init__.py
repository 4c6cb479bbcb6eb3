"""Tailfill: Kafka history + live tail into an Iceberg table, exactly once, with the proof.

The package is laid out by stage, under a small model (``offsets``, ``config``, ``errors``,
``schema``): ``source`` reads Kafka, ``lake`` turns records into rows and commits them with the
offset ledger, ``proof`` validates completeness, ``run`` plans and runs the Spark job, and ``dev``
holds the embedded broker, the sample producer and test failpoints. Spark-side modules are named
``spark_*``; nothing here imports Airflow (that corner is ``plugins/tailfill_airflow``).
"""

__version__ = "0.1.0"
