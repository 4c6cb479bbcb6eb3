"""The one way Tailfill tries again: a bounded number of attempts, waiting longer after each failure.

Used wherever another party may be briefly in the way — a conflicting commit by another writer, a
registry that does not answer, two processes creating one catalog — as::

    for attempt in retrying(COMMIT_ATTEMPTS, on=CommitFailedException, first_wait=0.05, max_wait=2.0):
        with attempt:
            ...  # raising CommitFailedException here tries again, after a wait

The last failure is raised as it is, for the caller to name in its own words. Built on ``tenacity``.
A run's restarts after a failed micro-batch follow their own policy (:mod:`tailfill.run.restarts`).
"""

from __future__ import annotations

from collections.abc import Callable

import tenacity

ExceptionTypes = type[BaseException] | tuple[type[BaseException], ...]


def retrying(tries: int, *, on: ExceptionTypes, first_wait: float = 0.0, max_wait: float = 0.0,
             when: Callable[[BaseException], bool] | None = None) -> tenacity.Retrying:
    """At most ``tries`` attempts; a failure with ``on`` (for which ``when``, if given, is true) is tried again
    after ``first_wait`` seconds, doubled per failure up to ``max_wait``. Anything else is raised at once."""
    retry = tenacity.retry_if_exception_type(on)
    if when is not None:
        retry = retry & tenacity.retry_if_exception(when)
    return tenacity.Retrying(stop=tenacity.stop_after_attempt(tries), retry=retry, reraise=True,
                             wait=tenacity.wait_exponential(multiplier=first_wait, max=max(max_wait, first_wait)))
