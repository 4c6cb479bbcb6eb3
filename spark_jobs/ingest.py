"""spark-submit entry point: ingest one pipeline's backfill slices or its tail.

    spark-submit --master local[2] spark_jobs/ingest.py --pipeline demo --mode backfill
    spark-submit --master local[2] spark_jobs/ingest.py --pipeline demo --mode tail --once

All logic is in :mod:`tailfill.spark.job`; this file only makes it submittable.
"""

import sys

from tailfill.spark.job import main

if __name__ == "__main__":
    sys.exit(main())
