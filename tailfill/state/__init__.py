"""Run state that processes share, declared once: typed records (:mod:`.records`) in one store (:mod:`.store`).

The store lives on the warehouse's filesystem (a local path or ``s3://``), so every machine that
reaches the table sees the same tail health, stop requests, lane progress, failures and batch
reports. ``$TAILFILL_HOME`` keeps only logs and caches.
"""
