"""Lake, the write path: records into rows or quarantine (``rows``), Parquet files (``files``), the
warehouse filesystem (``storage``), tables (``tables``), prepare on the executors (``prepare``,
``spark_writer``), one batch's audit (``batch_summary``), the commit with the offset ledger
(``commit``, ``ledger``) and the partition spec (``partition_terms``, ``partition``). Table upkeep is
:mod:`tailfill.upkeep`; run telemetry, :mod:`tailfill.state`."""
