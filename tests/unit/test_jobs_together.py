"""Jobs run together by one application: every tail at once, backfills a few per core, executors warmed once."""

import threading
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest

from tailfill.run.spark_job import BACKFILLS_PER_CORE, Together


class _Session:  # what the policy asks of a classic session: its cores
    def __init__(self, cores: int) -> None:
        self.sparkContext = SimpleNamespace(defaultParallelism=cores)


def _run_all(specs, cores, job, per_core=BACKFILLS_PER_CORE):
    lines: list[str] = []
    together = Together(sum(1 for spec in specs if spec.mode == "backfill"), lines.append, per_core)

    def one(spec):
        with together.slot(spec, _Session(cores)):
            return job(spec)

    with ThreadPoolExecutor(max_workers=len(specs)) as pool:
        results = list(pool.map(one, specs))
    return results, lines


@pytest.mark.parametrize("per_core", [BACKFILLS_PER_CORE, 1])  # 1: jobs that each run a streaming query
def test_backfills_run_a_few_per_core_of_the_application_at_a_time(per_core):
    at_once = 2 * per_core
    running, most, lock = [0], [0], threading.Lock()
    all_in = threading.Barrier(at_once, timeout=30)  # the first ones must be in at once, or this times out

    def job(spec):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        if spec.index < at_once:
            all_in.wait()
        with lock:
            running[0] -= 1
        return spec.name

    specs = [SimpleNamespace(mode="backfill", name=f"b{i}", index=i) for i in range(at_once + 3)]
    results, lines = _run_all(specs, 2, job, per_core)
    assert results == [spec.name for spec in specs] and most[0] == at_once
    assert lines == [f"{at_once + 3} backfill jobs run {at_once} at a time ({per_core} per core of the "
                     "application); the others wait their turn"]


def test_tails_all_run_at_once_beside_backfills():
    tails = BACKFILLS_PER_CORE + 2  # more tails than a core's backfill slots: only if none waits for a turn
    tails_in = threading.Barrier(tails, timeout=30)

    def job(spec):
        if spec.mode == "tail":
            tails_in.wait()
        return spec.name

    specs = [SimpleNamespace(mode="tail", name=f"t{i}") for i in range(tails)] + [SimpleNamespace(mode="backfill",
                                                                                                 name="b0")]
    results, lines = _run_all(specs, 1, job)
    assert results == [spec.name for spec in specs] and lines == []


def test_a_new_applications_executors_are_warmed_by_one_job_only():
    together = Together(20, print)
    with ThreadPoolExecutor(max_workers=20) as pool:
        firsts = list(pool.map(lambda _: together.first_to_warm(), range(20)))
    assert firsts.count(True) == 1
