"""Proof: offset-to-row completeness (``completeness``, ``audit``), Great Expectations suites (``expectations``),
reports beside the table (``reports``), the typed verdict (``result``), and ``validate``, which runs them all."""
