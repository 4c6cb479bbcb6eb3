"""One planner: the same request through the CLI and through the DAG's tasks gets the same job specs."""

from __future__ import annotations

import logging

import pytest
from helpers import ingested, provision, tables_of

from tailfill import cli
from tailfill.dev.batches import commit_sample_batch
from tailfill.dev.sample import produce_sample
from tailfill.errors import ConfigError
from tailfill.lake.ledger import read_cutover
from tailfill.offsets import OffsetRange, PartitionOffsets, subtract, total
from tailfill.pipeline.handle import open_pipeline
from tailfill.run.contract import JobSpec
from tailfill.run.preflight import preflight
from tailfill.run.verdict import backfill_verdict

pytestmark = pytest.mark.integration


def _planned(specs: list[JobSpec]) -> list[tuple]:
    """What a lane runs, without its run id (the CLI and Airflow name runs differently)."""
    return [(s.pipeline, s.mode, [sl.to_dict() for sl in s.slices], s.once, s.stop_after_seconds,
             s.max_offsets_per_batch, s.max_offsets_per_second) for s in specs]


def test_a_backfill_request_plans_the_same_lanes_from_the_cli_and_the_dag(make_pipeline, dag_factory):
    cfg = make_pipeline(backfill__slices=8, backfill__max_offsets_per_batch=700)
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 4_000, 4)
    topic = cfg.source.topic
    start, end = f'{{"{topic}": {{"0": 100, "1": 0, "2": 0, "3": 0}}}}', f'{{"{topic}": {{"0": 900, "1": 800}}}}'

    args = cli.build_parser().parse_args(["backfill", cfg.path, "--from", start, "--to", end, "--slices", "6",
                                          "--lanes", "3", "--max-rate", "5000"])
    from_cli = cli.backfill_plan(open_pipeline(cfg), args).specs
    params = {"from_offsets": start, "to_offsets": end, "slices": 6, "max_parallel_slices": 3,
              "max_offsets_per_second": 5000, "committed_ranges": "skip"}
    from_dag = [JobSpec.parse(lane["args"]) for lane in dag_factory.plan_lanes(cfg, params, "manual__1")]

    assert _planned(from_cli) == _planned(from_dag)
    assert len(from_cli) == 3 and sum(len(s.slices) for s in from_cli) == 6
    assert {s.max_offsets_per_batch for s in from_dag} == {700}  # the backfill's own cap, not the tail's tuning
    assert {s.max_offsets_per_second for s in from_dag} == {5000}
    p0 = next(tp for tp in PartitionOffsets.from_json(start).offsets if tp.partition == 0)
    assert from_cli[0].slices[0].start[p0] == 100 and from_cli[-1].slices[-1].end[p0] == 900  # the bounds asked


def test_the_tail_plans_the_same_spec_from_the_cli_and_the_dag(make_pipeline, dag_factory):
    cfg = make_pipeline()
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 1_000, 4)  # history, before the cutover
    from tailfill.run.planner import TailRequest, plan_tail

    plan_tail(open_pipeline(cfg), TailRequest(once=True), "tail-0")  # the first plan records the cutover at the end
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 1_000, 4)
    args = cli.build_parser().parse_args(["tail", cfg.path, "--once"])
    from_cli = plan_tail(open_pipeline(cfg), TailRequest(args.once, args.stop_after), "tail-1").spec
    tuned = dag_factory.tune_tail(cfg, "scheduled__1")
    assert tuned is not None and tuned["pending"] == 1_000
    assert _planned([from_cli]) == _planned([JobSpec.parse(tuned["args"])])


def test_fail_on_committed_refuses_an_overlapping_range_from_either_side(make_pipeline, dag_factory):
    cfg = make_pipeline()
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 400, 4)
    commit_sample_batch(open_pipeline(cfg), "earlier", 0, [OffsetRange(cfg.source.topic, 0, 0, 50)])

    args = cli.build_parser().parse_args(["backfill", cfg.path, "--on-committed", "fail"])
    with pytest.raises(ConfigError, match=r"overlaps committed offsets in .*\[0\] \[0, 100\)"):
        cli.backfill_plan(open_pipeline(cfg), args)
    params = {"from_offsets": "earliest", "to_offsets": "cutover", "slices": 2, "max_parallel_slices": 1,
              "max_offsets_per_second": None, "committed_ranges": "fail"}
    with pytest.raises(ConfigError, match=r"overlaps committed offsets"):
        dag_factory.plan_lanes(cfg, params, "manual__1")


def test_replay_on_committed_replaces_the_committed_part_and_plans_the_rest(make_pipeline, dag_factory, caplog):
    """The form's ``replay``: the plan task re-reads the committed offsets from the broker, the lanes get the rest."""
    cfg = make_pipeline()
    topic = cfg.source.topic
    produce_sample(cfg.source.bootstrap_servers, topic, 400, 4)
    commit_sample_batch(open_pipeline(cfg), "earlier", 0, [OffsetRange(topic, 0, 0, 50)], bad_every=10)
    assert len(ingested(cfg)[1]) == 5  # the synthetic batch's malformed records; the broker's are all valid

    params = {"from_offsets": "earliest", "to_offsets": "cutover", "slices": 2, "max_parallel_slices": 1,
              "max_offsets_per_second": None, "committed_ranges": "replay"}
    with caplog.at_level(logging.INFO):
        [lane] = dag_factory.plan_lanes(cfg, params, "manual__1")
    assert "replayed 50 offsets in 1 batch: 50 rows, 0 quarantined" in caplog.text
    rows, bad = ingested(cfg)
    assert sorted(rows) == [(0, o) for o in range(50)] and not bad  # each offset once, now as the broker has it
    planned = JobSpec.parse(lane["args"])
    assert sum(total(subtract(s.ranges, [OffsetRange(topic, 0, 0, 50)])) for s in planned.slices) == 350
    assert cli.main(["validate", cfg.path, "--all"]) == 0


def test_a_replay_only_backfill_is_replayed_and_proven_over_exactly_the_replayed_range(make_pipeline, dag_factory,
                                                                                         capsys):
    """The form's ``replay`` over a committed range: the verdict is REPLAYED, not nothing to do, and the replay's
    validation covers exactly the replayed offsets; the CLI's ``--on-committed replay`` says the same verdict."""
    cfg = make_pipeline()
    topic = cfg.source.topic
    produce_sample(cfg.source.bootstrap_servers, topic, 400, 4)
    commit_sample_batch(open_pipeline(cfg), "earlier", 0, [OffsetRange(topic, 0, 0, 50)], bad_every=10)
    committed = f'{{"{topic}": {{"0": 50}}}}'
    params = {"from_offsets": "earliest", "to_offsets": committed, "slices": 1, "max_parallel_slices": 1,
              "max_offsets_per_second": None, "committed_ranges": "replay"}
    handed: list[dict] = []
    assert dag_factory.plan_lanes(cfg, params, "manual__1", handed.append) == []  # nothing left for a lane

    [replayed] = handed
    verdict = backfill_verdict(0, 0, replayed["offsets"])
    assert (verdict.code, verdict.headline.split(":")[0]) == ("REPLAYED", "REPLAYED 50 offsets")
    proof = dag_factory.validate_replay(cfg, replayed["run_id"], "http://127.0.0.1/report")
    assert proof["verdict"] == "COMPLETE" and proof["offsets"] == 50
    assert proof["ranges"] == {topic: {"0": [[0, 50]]}}  # the replayed range, no more, no less
    assert (proof["rows"], proof["quarantined"]) == (50, 0)  # the synthetic bad rows re-read as the broker has them

    assert cli.main(["backfill", cfg.path, "--to", committed, "--on-committed", "replay"]) == 0
    assert "backfill of itest: REPLAYED 50 offsets: their rows were re-read and replaced" in capsys.readouterr().out


def test_preflight_only_checks_it_records_no_cutover(make_pipeline):
    cfg = make_pipeline()
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 100, 4)
    provision(cfg)  # the tables as an earlier plan made them: preflight still records no cutover in them
    for mode in ("backfill", "tail"):
        preflight(open_pipeline(cfg), mode)
    assert read_cutover(tables_of(cfg)[0]) is None
    assert cli.main(["backfill", cfg.path, "--to", f'{{"{cfg.source.topic}": {{"0": 0}}}}']) == 0
    assert read_cutover(tables_of(cfg)[0]) is None  # an explicit end needs no cutover either



def test_the_cli_runs_its_lanes_side_by_side_and_reads_back_each_jobs_result(make_pipeline, capsys):
    """Through real ``spark-submit``s: the summary comes from the jobs' result documents."""
    cfg = make_pipeline(backfill__slices=4)
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 2_000, 4)
    assert cli.main(["backfill", cfg.path, "--lanes", "2", "--master", "local[1]"]) == 0
    out = capsys.readouterr().out
    parts = [line.split() for line in out.splitlines() if line.startswith("  slices ")]
    assert len(parts) == 2, out  # one row per lane, from each job's TAILFILL_RESULT document
    assert sum(int(p[-5].replace(",", "")) for p in parts) == 2_000  # the offsets column
    assert cli.main(["validate", cfg.path, "--all"]) == 0


def test_the_forms_bad_bounds_fail_with_one_line_and_what_the_plan_changes_is_said(make_pipeline, dag_factory, caplog):
    """A garbage From, a From after the cutover, a To past the cutover, more lanes than slices: each one line."""
    cfg = make_pipeline()
    topic = cfg.source.topic
    produce_sample(cfg.source.bootstrap_servers, topic, 400, 4)
    params = {"from_offsets": "earliest", "to_offsets": "cutover", "slices": 2, "max_parallel_slices": 1,
              "max_offsets_per_second": None, "committed_ranges": "skip"}
    with pytest.raises(ConfigError, match=r"^From \(from_offsets\): offsets are not valid JSON .*\(fix: `earliest`"):
        dag_factory.plan_lanes(cfg, params | {"from_offsets": "yesterday"}, "manual__1")
    with pytest.raises(ConfigError, match=r"^To \(to_offsets\): offsets must be a JSON object"):
        dag_factory.plan_lanes(cfg, params | {"to_offsets": "[1, 2]"}, "manual__1")
    dag_factory.plan_lanes(cfg, params | {"to_offsets": f'{{"{topic}": {{"0": 0}}}}'}, "manual__0")  # no cutover
    plan = dag_factory.plan_lanes(cfg, params, "manual__1")  # records the cutover at the end: 100 per partition
    assert len(plan) == 1
    with pytest.raises(ConfigError, match=r"^backfill bounds: a start after its end: .*\[0\] from 150 to 100 "
                                          r"\(fix: swap From and To\)"):
        dag_factory.plan_lanes(cfg, params | {"from_offsets": f'{{"{topic}": {{"0": 150}}}}'}, "manual__2")

    produce_sample(cfg.source.bootstrap_servers, topic, 400, 4)  # the broker's end moves past the cutover
    caplog.clear()
    lanes = dag_factory.plan_lanes(cfg, params | {"to_offsets": f'{{"{topic}": {{"0": 150}}}}', "slices": 1,
                                                  "max_parallel_slices": 5}, "manual__3")
    assert len(lanes) == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any(w.startswith(f"warning: To passes the cutover on {topic}[0] to 150 (cutover 100)") for w in warnings), \
        warnings
    assert any("lanes: 5 asked, 1 used: there are 1 slice(s) to run" in r.getMessage() for r in caplog.records)
