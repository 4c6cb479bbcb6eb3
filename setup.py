"""Packages found, not listed: every package under ``tailfill/``, plus the two that the repository
keeps at its top level and ships inside the package (their folders are mapped in pyproject.toml's
``[tool.setuptools.package-dir]``; pyproject alone cannot both find packages and add mapped ones)."""

from setuptools import find_packages, setup

MAPPED = ["tailfill.proof.suites", "tailfill.spark_jobs"]  # expectations/ and spark_jobs/

setup(packages=[*find_packages(include=["tailfill", "tailfill.*"]), *MAPPED])
