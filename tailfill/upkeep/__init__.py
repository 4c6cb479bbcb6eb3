"""Table upkeep: compaction (``compact``), snapshot expiry that first archives each batch's audit
(``expire``, ``audit_log``) and orphan-file cleanup raced safely against commits (``orphans``).
``tailfill maintain`` and the maintenance DAG run them through :mod:`tailfill.run.maintain`."""
