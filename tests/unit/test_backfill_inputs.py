"""A backfill's inputs are refused before any work: by Airflow's own param validation when the run is triggered
(the form and the REST API), else by the backfill's first task in one line, before the broker is asked."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from tailfill.errors import ConfigError
from tailfill.pipeline.load import load_pipeline
from tailfill.run.backfill_inputs import bound_offsets, check_backfill_conf, unknown_keys

REPO = Path(__file__).resolve().parents[2]
KNOWN = ("from_offsets", "to_offsets", "slices", "max_parallel_slices", "max_offsets_per_second", "committed_ranges")


def test_a_misspelled_key_is_refused_naming_the_key_it_resembles_and_every_known_one():
    with pytest.raises(ConfigError) as refused:
        check_backfill_conf({"to_offset": "cutover", "slice": 2, "slices": 2}, KNOWN)
    assert str(refused.value) == (
        "backfill conf: unknown keys 'slice' (did you mean 'slices'?), 'to_offset' (did you mean 'to_offsets'?); "
        "the known keys are committed_ranges, from_offsets, max_offsets_per_second, max_parallel_slices, slices, "
        "to_offsets (fix: trigger the run again with the known keys only)")
    assert unknown_keys({"colour": 1}, KNOWN).startswith("unknown key 'colour'; the known keys are committed_ranges")
    assert unknown_keys({"slices": 3}, KNOWN) is None


def test_a_start_after_its_end_is_refused_naming_the_partition():
    with pytest.raises(ConfigError, match=r"^backfill bounds: a start after its end: t\[1\] from 900 to 100 "
                                          r"\(fix: swap From and To\)$"):
        check_backfill_conf({"from_offsets": '{"t": {"0": 5, "1": 900}}', "to_offsets": '{"t": {"0": 9, "1": 100}}'},
                            KNOWN)
    check_backfill_conf({"from_offsets": '{"t": {"0": 5}}', "to_offsets": '{"t": {"0": 5}}'}, KNOWN)  # empty: fine
    check_backfill_conf({"from_offsets": '{"t": {"0": 900}}', "to_offsets": "cutover"}, KNOWN)  # the planner's job
    check_backfill_conf(None, KNOWN)


def test_a_bound_is_its_keyword_or_offsets_json():
    assert bound_offsets("from_offsets", "earliest") is None and bound_offsets("to_offsets", "cutover") is None
    assert bound_offsets("to_offsets", '{"t": {"0": 7}}').to_dict() == {"t": {"0": 7}}
    with pytest.raises(ConfigError, match=r"^From \(from_offsets\): offsets are not valid JSON .*'yesterday'.* "
                                          r"\(fix: `earliest`, or offsets as a JSON object like"):
        bound_offsets("from_offsets", "yesterday")
    with pytest.raises(ConfigError, match=r"^To \(to_offsets\): .* \(fix: `cutover`"):
        bound_offsets("to_offsets", "earliest")


@pytest.fixture
def demo_backfill(tmp_path, monkeypatch):
    """The demo's backfill DAG as the API server holds it (serialized and read back), and as its tasks run."""
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    monkeypatch.setenv("TAILFILL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TAILFILL_PIPELINES", str(REPO / "pipelines"))
    monkeypatch.syspath_prepend(str(REPO / "plugins"))
    from airflow.serialization.serialized_objects import DagSerialization
    from tailfill_airflow.dag_factory import backfill_dag

    dag = backfill_dag(load_pipeline(REPO / "pipelines" / "demo.yaml"))
    return dag, DagSerialization.from_dict(DagSerialization.to_dict(dag))


def trigger_refusal(served, conf: dict) -> str | None:
    """What Airflow answers a trigger with ``conf``: the trigger endpoint and the form run this check (the serialized
    DAG's ``create_dagrun``) before a run exists, and answer HTTP 400 with its message; None: a run is created."""
    from airflow.exceptions import ParamValidationError

    try:
        served.params.deep_merge(conf).validate()
    except ParamValidationError as exc:
        return str(exc).splitlines()[0]
    return None


@pytest.mark.parametrize(("conf", "refusal"), [
    ({"slices": 0}, "Invalid input for param slices: 0 is less than the minimum of 1"),
    ({"max_parallel_slices": 0}, "Invalid input for param max_parallel_slices: 0 is less than the minimum of 1"),
    ({"from_offsets": "yesterday"}, "Invalid input for param from_offsets: 'yesterday' does not match"),
    ({"to_offsets": "{not json"}, "Invalid input for param to_offsets: '{not json' does not match"),
    ({"to_offsets": '{"t": {"0": -5}}'}, "Invalid input for param to_offsets:"),
    ({"from_offsets": "cutover"}, "Invalid input for param from_offsets: 'cutover' does not match"),
    ({"committed_ranges": "overwrite"}, "Invalid input for param committed_ranges: 'overwrite' is not one of"),
])
def test_airflow_refuses_a_bad_field_when_the_run_is_triggered(demo_backfill, conf, refusal):
    _, served = demo_backfill
    assert (trigger_refusal(served, conf) or "").startswith(refusal)


def test_airflow_accepts_the_keywords_and_offsets_json(demo_backfill):
    _, served = demo_backfill
    assert trigger_refusal(served, {}) is None
    assert trigger_refusal(served, {"from_offsets": '{"demo.events": {"0": 10, "1": 0}}',
                                    "to_offsets": '{ "demo.events" : { "0" : 500 } }', "slices": 1}) is None


@pytest.mark.parametrize(("conf", "line"), [
    ({"to_offset": '{"t": {"0": 5}}'}, "unknown key 'to_offset' (did you mean 'to_offsets'?); the known keys are "),
    ({"from_offsets": '{"t": {"0": 9}}', "to_offsets": '{"t": {"0": 1}}'},
     "backfill bounds: a start after its end: t[0] from 9 to 1 (fix: swap From and To)"),
])
def test_what_airflow_lets_through_fails_the_first_task_in_one_line_before_the_broker(demo_backfill, conf, line):
    """An unknown key, or From after To, passes Airflow's per-field check: ``preflight`` fails at once (no retry) with
    one line, and its ``failure`` XCom says the same, before any broker or Spark work (the demo's broker is not up)."""
    from airflow.sdk.exceptions import AirflowFailException
    from airflow.sdk.execution_time.context import set_current_context

    dag, served = demo_backfill
    assert trigger_refusal(served, conf) is None  # a run exists
    pushed: dict = {}
    ti = SimpleNamespace(try_number=1, xcom_push=lambda key, value: pushed.update({key: value}))
    with set_current_context({"dag_run": SimpleNamespace(conf=conf), "ti": ti}), \
            pytest.raises(AirflowFailException) as failed:
        dag.get_task("preflight").python_callable()
    [first] = str(failed.value).splitlines()
    assert first.startswith("preflight of demo (backfill) failed: ") and line in first, first
    if "unknown key" in line:
        assert re.search(r"the known keys are committed_ranges, from_offsets, max_offsets_per_second, "
                         r"max_parallel_slices, slices, to_offsets \(fix:", first), first
    assert pushed["failure"]["retryable"] is False and line in pushed["failure"]["cause"]
