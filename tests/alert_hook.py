"""An alerting hook for the Airflow tests (``TAILFILL_ON_FAILURE=alert_hook:record``): each alert's record is
appended as one JSON line to ``$TAILFILL_TEST_ALERTS``."""

from __future__ import annotations

import json
import os
from typing import Any


def record(context: Any, alert: dict) -> None:
    with open(os.environ["TAILFILL_TEST_ALERTS"], "a") as out:
        out.write(json.dumps(alert) + "\n")


def alerts(path: str | os.PathLike) -> list[dict]:
    """The alerts the hook received, oldest first."""
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []
