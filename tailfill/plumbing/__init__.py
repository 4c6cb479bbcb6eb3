"""Plumbing that knows nothing of Kafka, formats or tables: the one retry helper (``retry``), whole-object
writes and the one lock (``durable``), the warehouse's filesystem (``warehouse``), detached processes
(``detached``)."""
