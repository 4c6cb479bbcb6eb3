"""Source: Kafka through confluent-kafka (``kafka``), and the ``tailfill_kafka`` data source
(``spark_source``; its readers in ``spark_reader``)."""
