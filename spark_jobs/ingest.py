"""spark-submit entry point: ingest a backfill's planned slices, or the tail, of one pipeline.

    spark-submit --master local[2] spark_jobs/ingest.py --pipeline demo --mode tail --run-id r1 --once

Backfill slices are planned by ``tailfill backfill`` or the backfill DAG, which pass them with
``--slices``. All logic is in :mod:`tailfill.run.spark_job`; this file only makes it submittable.
"""

import sys

from tailfill.run.spark_job import main

if __name__ == "__main__":
    sys.exit(main())
