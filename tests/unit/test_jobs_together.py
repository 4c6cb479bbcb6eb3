"""Jobs run together by one application: every tail at once, backfills as many at a time as it has cores."""

import threading
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

from tailfill.run import spark_job


class _Session:  # what the policy asks of a classic session: its cores
    def __init__(self, cores: int) -> None:
        self.sparkContext = SimpleNamespace(defaultParallelism=cores)


def _run_all(specs, cores, monkeypatch, job):
    monkeypatch.setattr(spark_job, "run_to_result", job)
    lines: list[str] = []
    run_one = spark_job._at_most_cores(_Session(cores), specs, lines.append)
    with ThreadPoolExecutor(max_workers=len(specs)) as pool:
        results = list(pool.map(lambda spec: run_one(spec, lines.append, lambda event: None), specs))
    return results, lines


def test_backfills_run_as_many_at_a_time_as_the_application_has_cores(monkeypatch):
    running, most, lock = [0], [0], threading.Lock()
    two_in = threading.Barrier(2, timeout=30)  # the first two must be in at once, or this times out

    def job(spec, spark, log, emit):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        if spec.name in ("b0", "b1"):
            two_in.wait()
        with lock:
            running[0] -= 1
        return spec.name

    specs = [SimpleNamespace(mode="backfill", name=f"b{i}") for i in range(7)]
    results, lines = _run_all(specs, 2, monkeypatch, job)
    assert results == [f"b{i}" for i in range(7)] and most[0] == 2
    assert lines == ["7 backfill jobs run 2 at a time (the application's cores); the others wait their turn"]


def test_tails_all_run_at_once_beside_backfills(monkeypatch):
    tails_in = threading.Barrier(3, timeout=30)  # three tails on one core: only if none waits for a turn

    def job(spec, spark, log, emit):
        if spec.mode == "tail":
            tails_in.wait()
        return spec.name

    specs = [SimpleNamespace(mode="tail", name=f"t{i}") for i in range(3)] + [SimpleNamespace(mode="backfill",
                                                                                             name="b0")]
    results, lines = _run_all(specs, 1, monkeypatch, job)
    assert results == ["t0", "t1", "t2", "b0"] and lines == []
