"""Lake: records into rows or quarantine (``rows``), Parquet files (``files``), tables (``tables``), the offset
ledger committed with the data (``ledger``), per-batch reports, and the ``tailfill_iceberg`` Spark sink."""
