"""Run: bounds and slices (``plan``), requests into job specs (``planner``), batch sizing (``tuning``), checks
(``preflight``), ``status``, the job's contract, result and ``spark-submit`` (``submit``), Spark's settings
(``runtime``), and the Spark job itself (``spark_*``)."""
