"""A REST catalog over a table bucket (SeaweedFS's ``-tableBucket``) with ``warehouse: s3://warehouse`` for the
catalog and the target, as the docs' example reads: preflight names every place a run writes that the bucket
refuses and the fix, and with ``target.state_root`` on an ordinary bucket the backfill and the proof work."""

from __future__ import annotations

import uuid

import pytest
from helpers import assert_exactly_once, backfill, high_watermarks

from tailfill import cli
from tailfill.dev.sample import produce_sample
from tailfill.pipeline.handle import open_pipeline
from tailfill.proof.reports import read_latest

pytestmark = pytest.mark.integration


def test_preflight_names_the_fix_and_state_root_on_an_ordinary_bucket_works(spark, make_pipeline, seaweedfs, capsys):
    refused = make_pipeline("bucket_only", rest=seaweedfs, target__warehouse="s3://warehouse")
    produce_sample(refused.source.bootstrap_servers, refused.source.topic, 100, 4)
    assert cli.main(["preflight", str(refused.path), "--mode", "backfill"]) == 1
    out = capsys.readouterr().out
    assert "FAILED: the run state s3://warehouse/_tailfill/bucket_only, " in out, out
    assert "is a table bucket" in out and "(fix: target.state_root: s3://<an ordinary bucket>/…" in out

    state_root = f"s3://tailfill/{uuid.uuid4().hex[:8]}/state"
    cfg = make_pipeline("with_state_root", rest=seaweedfs, target__warehouse="s3://warehouse",
                        target__state_root=state_root)
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 2_000, 4, bad_every=400)
    assert cli.main(["preflight", str(cfg.path), "--mode", "backfill"]) == 0
    assert f"batch audit under {state_root}/with_state_root" in capsys.readouterr().out
    backfill(spark, cfg)
    assert_exactly_once(cfg, high_watermarks(cfg))
    assert cli.main(["validate", str(cfg.path), "--all"]) == 0
    with open_pipeline(cfg) as pipeline:
        assert pipeline.state.root == f"{state_root}/with_state_root"
        assert read_latest(pipeline).html.startswith(f"{state_root}/_validation/with_state_root/")
