"""Value types beside the small model: the shapes records take (``schema``), column types (``column_types``),
partition terms (``partition_terms``) and produce-to-commit latency (``freshness``)."""
