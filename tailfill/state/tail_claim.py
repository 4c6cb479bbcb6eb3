"""One tail per pipeline: the running tail's claim in the shared run state, which survives crashes.

A claim is one object per generation, ``tail/claims/<generation>.json`` (a :class:`TailClaim`: host, process, since
when, run); the highest generation is the claim in force. A tail makes the next generation with a conditional
write (:meth:`~tailfill.state.store.StateStore.create`: a link locally, ``If-None-Match`` on S3), so of two tails
that start at once exactly one gets it, on one machine or across machines sharing the state. A claim in force is
taken over when its tail is gone: on this host, its process no longer runs (a pid of an earlier boot, or reused by
another process, is gone too); on another host, whose processes this one cannot see, when neither the claim nor the
tail's heartbeat (:class:`~tailfill.state.records.TailHealth`) is recent. Otherwise the new tail is refused with
one line naming the running one (:class:`~tailfill.errors.TailRunning`). The tail drops its claim when it ends.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Callable, Iterator

from tailfill.errors import TailRunning
from tailfill.plumbing.detached import alive, boot_id, started_at
from tailfill.state.records import MIN_LIVE_SECONDS, TailClaim
from tailfill.state.store import StateStore, read_health
from tailfill.values.moments import moment

CLAIMS = "tail/claims"
ATTEMPTS = 3  # a tail that loses a race to a claim that turns out stale tries again this often


def mine(run_id: str) -> TailClaim:
    """A claim for this process."""
    return TailClaim(socket.gethostname(), os.getpid(), run_id, time.time(), boot_id(), started_at(os.getpid()))


def in_force(store: StateStore) -> tuple[int, TailClaim] | None:
    """The claim in force and its generation, or None when no tail claimed the pipeline."""
    names = [i.base_name for i in store.list(CLAIMS) if i.base_name.endswith(".json")]
    for name in sorted(names, reverse=True):  # zero-padded: by name is by generation
        text = store.get(f"{CLAIMS}/{name}")
        if text is not None:
            return int(name.removesuffix(".json")), TailClaim.from_json(text)
    return None


def gone(claim: TailClaim, store: StateStore, now: float | None = None) -> bool:
    """Whether the tail of ``claim`` no longer runs (see the module's description)."""
    now = time.time() if now is None else now
    if claim.host == socket.gethostname():  # a zombie is gone too (its parent may never collect it)
        return (claim.boot != boot_id() or claim.started is None or started_at(claim.pid) != claim.started
                or not alive(claim.pid))
    if now - claim.since <= MIN_LIVE_SECONDS:
        return False
    health = read_health(store)
    return health is None or not health.live(now)


def describe(claim: TailClaim, now: float | None = None) -> str:
    """``on host h1, pid 4242, since <date> <time> UTC (3m12s ago), run tail-…``."""
    now = time.time() if now is None else now
    return f"on host {claim.host}, pid {claim.pid}, since {moment(claim.since, now)}, run {claim.run_id}"


def running(store: StateStore) -> TailClaim | None:
    """The claim of the tail that runs now, or None."""
    held = in_force(store)
    return held[1] if held is not None and not gone(held[1], store) else None


def status_line(store: StateStore) -> str:
    """What runs, for ``status``: the running tail's host, process, start and run, or that none runs."""
    held = in_force(store)
    if held is None:
        return "tail: not running"
    if gone(held[1], store):
        return f"tail: not running (the last one, {describe(held[1])}, is gone; the next tail takes over its claim)"
    return f"tail: running {describe(held[1])}"


def refusal(pipeline: str, claim: TailClaim) -> TailRunning:
    """The one line that refuses a second tail of ``pipeline``, naming the running one."""
    return TailRunning(f"a tail of {pipeline} is running already, {describe(claim)}; one tail per pipeline")


def check_free(store: StateStore, pipeline: str) -> None:
    """Refuse when a tail of ``pipeline`` runs (before a new one is planned)."""
    other = running(store)
    if other is not None:
        raise refusal(pipeline, other)


def claim(store: StateStore, pipeline: str, run_id: str, say: Callable[[str], None]) -> tuple[int, TailClaim]:
    """Claim the tail of ``pipeline`` for this process (``say``: the line when a gone tail's claim is taken over);
    raises :class:`TailRunning` when another one runs."""
    for _ in range(ATTEMPTS):
        held = in_force(store)
        if held is not None and not gone(held[1], store):
            raise refusal(pipeline, held[1])
        generation = held[0] + 1 if held is not None else 0
        ours = mine(run_id)
        if store.create(_key(generation), ours.to_json()):
            if held is not None:
                say(f"took over the claim of a tail that is gone ({describe(held[1])})")
                store.delete(_key(held[0]))
            return generation, ours
    raise TailRunning(f"another tail of {pipeline} claimed it at the same moment, {ATTEMPTS} times in a row; one tail "
                      "per pipeline")


def release(store: StateStore, generation: int) -> None:
    """Drop this tail's claim (a newer one, of a tail that took it over, stays)."""
    store.delete(_key(generation))


@contextlib.contextmanager
def claimed(store: StateStore, pipeline: str, run_id: str, say: Callable[[str], None]) -> Iterator[TailClaim]:
    """The tail of ``pipeline`` is this process's within ``with``."""
    generation, ours = claim(store, pipeline, run_id, say)
    try:
        yield ours
    finally:
        release(store, generation)


def _key(generation: int) -> str:
    return f"{CLAIMS}/{generation:012d}.json"
