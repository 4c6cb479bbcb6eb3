"""Development aids: the embedded Apache Kafka broker (``broker``, ``kafka_server``) and its pinned jars
(``jars``), a sample producer (``sample``), failpoints (``faults``)."""
