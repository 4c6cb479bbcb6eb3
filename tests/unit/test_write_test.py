"""The write test of every place a run writes its own files (tailfill.run.write_test): which places, once per
process, and a refusal as one line naming each place, its bucket, the error and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tailfill.errors import PreflightError
from tailfill.pipeline.handle import open_pipeline
from tailfill.pipeline.load import load_pipeline
from tailfill.run import write_test
from tailfill.run.write_test import Place, ensure_writable, refusal_line, run_places

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "pipelines" / "demo.yaml"
DENIED = ("When initiating multiple part upload for key '_tailfill/rest/audit/tailfill.rest_events_quarantine/batches/"
          "8247864534182143373.json' in bucket 'warehouse': AWS Error ACCESS_DENIED during CreateMultipartUpload "
          "operation: Access Denied. (Request ID: 18EC7A20A5556866889E3405)")


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("TAILFILL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CATALOG_CREDENTIAL", "id:secret")
    monkeypatch.setattr(write_test, "_PASSED", set())  # a fresh process's cache
    return tmp_path / "home"


def rest_pipeline(tmp_path: Path, **target):
    """The demo pipeline on a REST catalog whose warehouse is ``s3://warehouse``, as the operations page shows it."""
    data = yaml.safe_load(DEMO.read_text())
    data["target"] = {"catalog": {"type": "rest", "uri": "http://catalog:8181", "warehouse": "s3://warehouse",
                                  "credential_env": "CATALOG_CREDENTIAL"},
                      "namespace": "tailfill", "table": "rest", "warehouse": "s3://warehouse",
                      "s3": {"endpoint": "http://s3:8333"}, **target}
    data["name"] = target.get("table", "rest")
    path = tmp_path / "rest.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_pipeline(path)


def test_a_run_writes_its_state_reports_audit_results_and_checkpoints(home):
    cfg = load_pipeline(DEMO)
    root = f"{home}/warehouse/_tailfill/demo"
    assert [(p.what, p.uri, p.local) for p in run_places(cfg, root)] == [
        ("run state", root, False),
        ("batch reports", f"{root}/runs", False),
        ("batch audit", f"{root}/audit/tailfill.demo_events/batches", False),
        ("batch audit", f"{root}/audit/tailfill.demo_events_quarantine/batches", False),
        ("validation results", (home / "warehouse" / "_validation" / "demo").as_uri(), False),
        ("checkpoints", f"{home}/checkpoints/demo", True),
    ]


def test_every_place_takes_one_write_once_per_process_and_keeps_nothing(home, monkeypatch):
    probes = []
    probe = write_test._probe
    monkeypatch.setattr(write_test, "_probe", lambda fs, place: (probes.append(place.uri), probe(fs, place)))
    pipeline = open_pipeline(load_pipeline(DEMO))
    ensure_writable(pipeline)
    places = run_places(pipeline.cfg, pipeline.state.root)
    assert probes == [p.uri for p in places]
    assert [f for f in home.rglob("*") if f.is_file()] == []  # every probe object removed again
    ensure_writable(pipeline)
    ensure_writable(open_pipeline(load_pipeline(DEMO)))  # another handle of the same pipeline: same places
    assert len(probes) == len(places)


def test_a_refusal_is_one_line_naming_the_place_and_the_fix_and_is_tried_again(home):
    (home / "checkpoints").parent.mkdir(parents=True)
    (home / "checkpoints").write_text("a file where the checkpoints' folder should be")
    pipeline = open_pipeline(load_pipeline(DEMO))
    for _ in range(2):  # a refusal is not remembered: the next run tries again
        with pytest.raises(PreflightError) as refused:
            ensure_writable(pipeline)
        line = str(refused.value)
        assert "\n" not in line
        assert line.startswith(f"the checkpoints {home}/checkpoints/demo refuses writes (local folder: ")
        assert line.endswith(f"(fix: checkpoint_location {home}/checkpoints must be a local folder this user can "
                             "write)")


def test_a_refusal_in_the_rest_catalogs_bucket_says_it_is_a_table_bucket_as_the_docs_show(tmp_path):
    cfg = rest_pipeline(tmp_path, namespace="analytics", table="clicks")
    root = "s3://warehouse/_tailfill/clicks"
    error = write_test._error_text(OSError(DENIED))
    assert error == "AWS Error ACCESS_DENIED during CreateMultipartUpload operation: Access Denied."
    line = refusal_line(cfg, [(p, error) for p in run_places(cfg, root) if not p.local])
    assert line == (
        f"the run state {root}, the batch reports {root}/runs, the batch audit "
        f"{root}/audit/analytics.clicks/batches and {root}/audit/analytics.clicks_quarantine/batches, the "
        f"validation results s3://warehouse/_validation/clicks refuse writes (bucket warehouse: {error}): bucket "
        "warehouse, target.warehouse and the REST catalog's warehouse, is a table bucket (S3 Tables, SeaweedFS's "
        "-tableBucket), which takes table paths only (fix: target.state_root: s3://<an ordinary bucket>/… on the "
        "same S3 endpoint, for Tailfill's own files; the tables stay where the catalog puts them)")
    shown = [text for text in (REPO / "docs" / "operations.md").read_text().splitlines()
             if text.startswith("error: the run state s3://warehouse/")]
    assert shown == [f"error: {line}"]  # the operations page shows the line as it is


def test_a_refusal_elsewhere_is_not_called_a_table_bucket(tmp_path):
    state_root = rest_pipeline(tmp_path, state_root="s3://tailfill/state")
    assert refusal_line(state_root, [(Place("run state", "s3://tailfill/state/rest"), "Access Denied.")]) == (
        "the run state s3://tailfill/state/rest refuses writes (bucket tailfill: Access Denied.) (fix: grant this "
        "user writes to target.state_root s3://tailfill/state, or set another one on an ordinary bucket it can "
        "write, target.state_root: s3://<an ordinary bucket>/…)")
    unanswered = refusal_line(rest_pipeline(tmp_path), [(Place("run state", "s3://warehouse/_tailfill/rest"),
                                                         "AWS Error NETWORK_CONNECTION during PutObject")])
    assert "table bucket" not in unanswered  # not a refusal: the endpoint did not answer
    assert unanswered.endswith("(fix: grant this user writes to bucket warehouse, or set target.state_root: "
                               "s3://<an ordinary bucket>/…)")
