"""Several topics into one table: a list, or a pattern that picks up the topics created later.

On the real broker: the backfill reads the history of every topic in one job and the tail what came after,
each offset of every topic-partition once in the table, the proof complete. A topic that starts matching the
pattern after the cutover is read by the next tail from its earliest offset (its history too), named in one
line; a topic that does not match is never read.
"""

from __future__ import annotations

import uuid
from collections import Counter

import pytest
from helpers import assert_each_offset_once, backfill, stored, tail

from tailfill.cli import main
from tailfill.dev.sample import produce_sample
from tailfill.errors import ConfigError
from tailfill.pipeline.handle import open_pipeline
from tailfill.proof.validate import validate
from tailfill.run.contract import new_run_id
from tailfill.run.planner import BackfillRequest, TailRequest, plan_backfill_lanes, plan_tail
from tailfill.run.spark_job import run
from tailfill.source.topics import ensure_topic

pytestmark = pytest.mark.integration

PARTITIONS = 2


def topics_made(cfg, names: list[str], records: int) -> None:
    for name in names:
        ensure_topic(cfg.source.bootstrap_servers, name, PARTITIONS)
        produce_sample(cfg.source.bootstrap_servers, name, records, PARTITIONS, bad_every=97)


def test_a_list_of_two_topics_lands_in_one_table_exactly_once(spark, make_pipeline, capsys):
    prefix = f"l{uuid.uuid4().hex[:8]}"
    names = [f"{prefix}.orders", f"{prefix}.refunds"]
    cfg = make_pipeline(source__topic=None, source__partitions=PARTITIONS, source__topics=names, expectations=[])
    topics_made(cfg, names, 300)

    with open_pipeline(cfg) as pipeline:  # one topic first, as the form's Topics field asks
        [spec] = plan_backfill_lanes(pipeline, BackfillRequest(topics=(names[1],)), lambda _: new_run_id("b")).specs
    [result] = run(spec, spark)
    assert result.offsets == 300 and {t for t, _, _ in stored(cfg)} == {names[1]}
    with open_pipeline(cfg) as pipeline, pytest.raises(ConfigError, match="'nope' not among the pipeline's topics"):
        plan_backfill_lanes(pipeline, BackfillRequest(topics=("nope",)), lambda _: new_run_id("b"))

    [result] = backfill(spark, cfg)  # the rest: the other topic
    assert result.offsets == 300
    topics_made(cfg, names, 100)  # after the cutover: the tail's
    tail(spark, cfg)

    assert assert_each_offset_once(cfg, names) == {names[0]: 400, names[1]: 400}

    assert main(["preflight", str(cfg.path)]) == 0
    out = capsys.readouterr().out
    assert f"{names[0]} has {PARTITIONS} partitions, {names[1]} has {PARTITIONS} partitions" in out
    assert main(["status", str(cfg.path)]) == 0
    out = capsys.readouterr().out
    assert all(f"topic {t}: {PARTITIONS} partitions, committed 400, lag 0" in out for t in names), out

    missing = make_pipeline(name="gone", source__topic=None, source__topics=[names[0], f"{prefix}.nope"])
    assert main(["preflight", str(missing.path)]) != 0  # a listed topic the broker lacks stops the run, named
    assert f"topic '{prefix}.nope' not found on {cfg.source.bootstrap_servers}" in capsys.readouterr().out


def test_a_pattern_picks_up_a_new_topic_with_its_history_ignores_others_and_names_one_gone(spark, make_pipeline):
    prefix = f"p{uuid.uuid4().hex[:8]}"
    first, second, later = f"{prefix}.shop.orders", f"{prefix}.shop.customers", f"{prefix}.shop.payments"
    other = f"{prefix}.audit.orders"  # does not match
    cfg = make_pipeline(source__topic=None, source__partitions=PARTITIONS, source__topic_pattern=rf"{prefix}\.shop\..*",
                        expectations=[])
    topics_made(cfg, [first, second, other], 200)

    [result] = backfill(spark, cfg)
    assert result.offsets == 400
    tail(spark, cfg)

    topics_made(cfg, [later], 150)  # created after the cutover: its whole history is the tail's
    topics_made(cfg, [first], 50)
    with open_pipeline(cfg) as pipeline:
        notes = plan_tail(pipeline, TailRequest(once=True), new_run_id("tail")).notes
    assert notes == [f"new topic {later} ({PARTITIONS} partitions, 150 offsets): the tail reads it from its "
                     "earliest offset"]
    tail(spark, cfg)

    per_topic = assert_each_offset_once(cfg, [first, second, later])
    assert per_topic == {first: 250, second: 200, later: 150}
    assert other not in per_topic
    with open_pipeline(cfg) as pipeline:  # known now: no note any more
        assert plan_tail(pipeline, TailRequest(once=True), new_run_id("tail")).notes == []

    delete_topic(cfg, second)  # gone: named, its rows kept, the rest still read and proven
    with open_pipeline(cfg) as pipeline:
        notes = plan_tail(pipeline, TailRequest(once=True), new_run_id("tail")).notes
    assert notes == [f"topic {second} is gone from {cfg.source.bootstrap_servers}: its rows stay in the table, "
                     "nothing more is read from it"]
    topics_made(cfg, [later], 20)
    tail(spark, cfg)
    assert stored(cfg).keys() >= {(second, p, o) for p in range(PARTITIONS) for o in range(100)}
    assert Counter(t for t, _, _ in stored(cfg))[later] == 170
    result = validate(open_pipeline(cfg), all_runs=True)  # the gone topic's offsets are still proven
    assert result.success, result.problems


def delete_topic(cfg, name: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": cfg.source.bootstrap_servers})  # alive until the deletion is done
    for future in admin.delete_topics([name], operation_timeout=30).values():
        future.result(timeout=30)
