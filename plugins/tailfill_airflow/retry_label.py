"""A lane keeps its label when it fails and will be retried.

Airflow 3.3's task runner reports a failure that will be retried as a ``RetryTask`` without the
rendered map index, which the API server then stores as empty: between tries, and in the history
of the failed try, the grid showed ``ingest_slice [0]`` instead of the lane's slices. Its terminal
messages for success and final failure carry the label; :func:`keep_label_on_retry` makes the retry
message carry it too. The wrapper changes nothing else and is a no-op once Airflow fills the field.
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["keep_label_on_retry"]


def keep_label_on_retry() -> None:
    """Wrap the task runner's failure outcome so a retry keeps the task's rendered map index (idempotent)."""
    try:
        from airflow.sdk.execution_time import task_runner
        from airflow.sdk.execution_time.comms import RetryTask
    except ImportError:  # not in a task runner's Airflow (parsing elsewhere): nothing to keep
        return
    original = task_runner._finalize_task_failure
    if getattr(original, "keeps_label", False):
        return

    @functools.wraps(original)
    def finalize(ti: Any, *args: Any, **kwargs: Any):
        msg, state = original(ti, *args, **kwargs)
        label = getattr(ti, "rendered_map_index", None)
        if isinstance(msg, RetryTask) and msg.rendered_map_index is None and label:
            msg = msg.model_copy(update={"rendered_map_index": label})
        return msg, state

    finalize.keeps_label = True  # type: ignore[attr-defined]
    task_runner._finalize_task_failure = finalize
