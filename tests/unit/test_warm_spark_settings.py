"""Which runner a job gets, and the warm Spark server's fallback to ``spark-submit``."""

from __future__ import annotations

import pytest

from tailfill.errors import ConfigError
from tailfill.run import warm_spark


def test_one_runner_choice_from_the_environment_or_the_caller_and_a_typo_is_named(monkeypatch):
    from tailfill.run.runners import SparkSubmitRunner, WarmFirst, choose_runner

    monkeypatch.setenv("TAILFILL_SPARK", "submit")
    assert isinstance(choose_runner(), SparkSubmitRunner)
    assert isinstance(choose_runner("warm"), WarmFirst)  # the caller's word wins
    monkeypatch.setenv("TAILFILL_SPARK", "warm")
    runner = choose_runner(master="spark://h:7077", conf={"spark.executor.memory": "2g"}, name="app")
    assert isinstance(runner, WarmFirst) and (runner.cold.master, runner.cold.conf) == (
        "spark://h:7077", {"spark.executor.memory": "2g"})
    assert isinstance(choose_runner("submit"), SparkSubmitRunner)
    monkeypatch.setenv("TAILFILL_SPARK", "hot")
    with pytest.raises(ConfigError, match="TAILFILL_SPARK='hot': use auto, connect, warm, submit"):
        choose_runner()


def test_a_job_the_warm_server_cannot_take_runs_cold_saying_why_unless_its_caller_stopped():
    from tailfill.errors import SparkServerError
    from tailfill.run.contract import JobSpec
    from tailfill.run.runners import WarmFirst

    class Cold:
        master, conf = None, {}

        def submit(self, spec, on_line):
            return f"cold {spec.run_id}"

    class Busy:
        def submit(self, spec, on_line):
            raise warm_spark.Refused("the warm Spark server runs other code and is busy")

    spec, said = JobSpec("demo", "tail", "tail-1"), []
    assert WarmFirst(Busy(), Cold()).submit(spec, said.append) == "cold tail-1"
    assert said == ["[tail-1] running cold (spark-submit): the warm Spark server runs other code and is busy"]
    with pytest.raises(SparkServerError, match="its caller has stopped"):
        WarmFirst(Busy(), Cold(), proceed=lambda: False).submit(spec, said.append)
    extra = Cold()
    extra.conf = {"spark.executor.memory": "2g"}  # only a new application takes them: not even asked warm
    assert WarmFirst(Busy(), extra).submit(spec, said.append) == "cold tail-1"
    assert "extra Spark settings asked for (spark.executor.memory)" in said[-1]
