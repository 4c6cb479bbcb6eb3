"""Run: plans (``plan``), batch sizing (``tuning``), checks (``preflight``), ``status``, the job's contract and
``spark-submit`` (``submit``), Spark's settings (``runtime``), and the Spark job itself (``spark_*``)."""
