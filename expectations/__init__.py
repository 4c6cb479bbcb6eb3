"""Great Expectations suites, installed as package data of ``tailfill.proof.suites`` (see pyproject.toml)."""
