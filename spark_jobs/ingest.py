"""spark-submit entry point: ingest a backfill's planned slices, or the tail, of one pipeline.

    spark-submit --master local[2] spark_jobs/ingest.py --pipeline demo --mode tail --run-id r1 --once

Backfill slices are planned by ``tailfill backfill`` or the backfill DAG, which pass them with
``--slices``. All logic is in :mod:`tailfill.run.spark_job`; this file only makes it submittable.
"""

import sys
from concurrent.futures import ThreadPoolExecutor

from tailfill.run.spark_session import get_session

if __name__ == "__main__":
    from tailfill.plumbing.detached import die_with_parent

    die_with_parent()  # the driver goes with its spark-submit JVM, however that dies: no job runs on unowned
    # The JVM takes seconds to build the session: import the job (about a second) meanwhile.
    with ThreadPoolExecutor(max_workers=1) as pool:
        session = pool.submit(get_session, app_name="tailfill-ingest")
        from tailfill.run.spark_job import main

        code = main(sys.argv[1:], spark=session)
    sys.exit(code)
