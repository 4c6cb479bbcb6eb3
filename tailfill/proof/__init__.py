"""Proof: offset-to-row completeness (``completeness``, ``audit``), Great Expectations suites (``expectations``),
reports beside the table (``reports``), and ``validate``, which runs them all."""
