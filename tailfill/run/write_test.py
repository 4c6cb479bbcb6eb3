"""The write test: every place a run writes Tailfill's own files takes one small object, before the run reads anything.

Besides its tables' files (placed by the catalog), a run writes the run state (tail health, stop requests,
failures, lanes), the batch reports (``runs/``), each table's batch audit (``audit/<namespace>.<table>/batches``)
and the validation results, all on the warehouse's filesystem, and its checkpoints (a local folder). Left to the
commit, a place that refuses writes would be found only after the planner made the tables and the job read a
batch, after three attempts and with a traceback. So every run tests them first, with the filesystem and the
credentials it will write with: one object written and removed per place (:func:`check_writable`), once per process
(:func:`ensure_writable`). The planner does it before it touches the catalog or the broker (``tailfill
backfill|tail``, the DAGs' ``plan`` and ``tune`` tasks), the job again in its own process (``spark-submit``,
Airflow's workers; a job on Spark Connect runs in the planner's process and finds it done), ``tailfill
preflight`` always. A refusal is one :class:`~tailfill.errors.PreflightError` line: each refused place, its
bucket, the error and the fix.

A warehouse that is a REST catalog's table bucket (AWS S3 Tables, SeaweedFS's ``-tableBucket``) takes table paths
only, so Tailfill's own files need ``target.state_root`` on an ordinary bucket. Nothing a REST catalog says tells
such a bucket from an ordinary one (SeaweedFS's ``/v1/config`` answers only the warehouse and a prefix), so it is
told by the first refused write: with no ``target.state_root``, a refusal in the bucket of the REST catalog's
warehouse says that it is a table bucket and gives that fix. The test asks neither the catalog nor the broker.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import pyarrow.fs as pafs

from tailfill.config import PipelineConfig
from tailfill.errors import DENIED_SIGNS, DiskFullError, PreflightError
from tailfill.lake.audit_log import audit_folder, batches_folder
from tailfill.pipeline.handle import Pipeline
from tailfill.plumbing.durable import write_whole
from tailfill.plumbing.warehouse import fs_path, make_dirs, s3_credentials
from tailfill.proof.reports import results_uri
from tailfill.run.plan import checkpoint_root
from tailfill.state.store import RUNS

PROBE = ".tailfill-write-test-"  # a hidden name: no listing of runs, audits or results takes it for one of theirs
ORDINARY = "target.state_root: s3://<an ordinary bucket>/…"


@dataclass(frozen=True)
class Place:
    """Where a run writes some of its own files: ``uri`` on the warehouse's filesystem, or a local folder."""

    what: str
    uri: str
    local: bool = False

    @property
    def bucket(self) -> str | None:
        return bucket_of(self.uri)


def bucket_of(location: str | None) -> str | None:
    """The bucket of an ``s3://`` location, else None."""
    if not location or not location.startswith("s3://"):
        return None
    return urlparse(location).netloc or None


def run_places(cfg: PipelineConfig, root: str) -> list[Place]:
    """Every place a run of ``cfg`` writes besides its tables (``root``: its state folder). A routed pipeline's
    own state holds only its routes: each table is a pipeline of its own, tested when its run starts."""
    places = [Place("run state", root), Place("batch reports", f"{root}/{RUNS}")]
    if cfg.target.routed:
        return places
    target = cfg.target
    places += [Place("batch audit", batches_folder(audit_folder(root, f"{target.namespace}.{name}")))
               for name in (target.table, target.quarantine_name)]
    return [*places, Place("validation results", results_uri(cfg)),
            Place("checkpoints", str(checkpoint_root(cfg, "backfill").parent), local=True)]


def _probe(fs: pafs.FileSystem, place: Place) -> None:
    """One small object written into ``place`` and removed; raises what the write or the removal raised."""
    name = f"{PROBE}{uuid.uuid4().hex}"
    if place.local:
        folder = Path(place.uri)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("ok")
        (folder / name).unlink()
        return
    make_dirs(fs, place.uri)
    probe = f"{place.uri.rstrip('/')}/{name}"
    write_whole(probe, "ok", fs)
    fs.delete_file(fs_path(probe))


_DENIED = (*DENIED_SIGNS, "403")  # a probe's own refusal: its HTTP status said alone counts too


def _error_text(exc: Exception) -> str:
    """What refused, without the probe's own key or a request id: ``AWS Error ACCESS_DENIED during …``."""
    if isinstance(exc, OSError) and exc.strerror and exc.filename:
        return exc.strerror
    text = " ".join(str(exc).split())
    text = re.sub(r"^.* in bucket '[^']*': ", "", text)
    return re.sub(r" \(Request ID: [^)]*\)", "", text) or type(exc).__name__


def _denied(error: str) -> bool:
    return any(sign in error.lower() for sign in _DENIED)


def check_writable(pipeline: Pipeline) -> list[str]:
    """Write one object into every place of :func:`run_places` and remove it; returns what passed. Raises
    :class:`PreflightError`, one line, naming each refused place, its bucket, the error and the fix.

    Every place is tried, so the line names them all; but once a bucket fails otherwise than by refusing (an
    endpoint that does not answer), its other places are not tried: they would wait the same way."""
    cfg, root = pipeline.cfg, pipeline.state.root
    places = run_places(cfg, root)
    refused: list[tuple[Place, str]] = []
    unanswered: set[str | None] = set()
    for place in places:
        if not place.local and place.bucket in unanswered:
            continue
        try:
            _probe(pipeline.fs, place)
        except (OSError, DiskFullError) as exc:
            refused.append((place, _error_text(exc)))
            if not place.local and not _denied(refused[-1][1]):
                unanswered.add(place.bucket)
    if refused:
        raise PreflightError(refusal_line(cfg, refused))
    _PASSED.add(_passed_key(pipeline))
    if cfg.target.routed:
        return [f"run state writable in {root}"]
    return [f"Tailfill's own files writable: run state, batch reports and batch audit under {root}, validation "
            f"results in {places[-2].uri}, checkpoints in {places[-1].uri}"]


def refusal_line(cfg: PipelineConfig, refused: list[tuple[Place, str]]) -> str:
    """One line for the places that refused: each with its bucket and the error, then why, and the fix."""
    groups: dict[tuple[str | None, str], list[Place]] = {}
    for place, error in refused:
        groups.setdefault((place.bucket, error), []).append(place)
    said, fixes = [], []
    for (bucket, error), places in groups.items():
        where = f"bucket {bucket}" if bucket else "local folder" if places[0].local else "warehouse"
        why, fix = _why_and_fix(cfg, places[0], error)
        said.append(f"{_named(places)} refuse{'s' if len(places) == 1 else ''} writes ({where}: {error})"
                    + (f": {why}" if why else ""))
        if fix not in fixes:
            fixes.append(fix)
    return "; ".join(said) + f" (fix: {'; '.join(fixes)})"


def _named(places: list[Place]) -> str:
    """``the run state s3://…, the batch audit s3://… and s3://…``: each kind once, its places after it."""
    kinds: dict[str, list[str]] = {}
    for place in places:
        kinds.setdefault(place.what, []).append(place.uri)
    return ", ".join(f"the {what} {' and '.join(uris)}" for what, uris in kinds.items())


def _why_and_fix(cfg: PipelineConfig, place: Place, error: str) -> tuple[str | None, str]:
    """Why ``place`` refused, when it can be told, and what to do."""
    target = cfg.target
    if place.local:
        return None, f"checkpoint_location {cfg.checkpoint_location} must be a local folder this user can write"
    if target.state_root is not None:
        return None, (f"grant this user writes to target.state_root {target.state_root}, or set another one on an "
                      f"ordinary bucket it can write, {ORDINARY}")
    if (target.catalog.type == "rest" and place.bucket is not None and _denied(error)
            and place.bucket in {bucket_of(target.warehouse), bucket_of(target.catalog.warehouse)}):
        return (f"bucket {place.bucket}, target.warehouse and the REST catalog's warehouse, is a table bucket (S3 "
                "Tables, SeaweedFS's -tableBucket), which takes table paths only",
                f"{ORDINARY} on the same S3 endpoint, for Tailfill's own files; the tables stay where the catalog "
                "puts them")
    if place.bucket is not None:
        return None, f"grant this user writes to bucket {place.bucket}, or set {ORDINARY}"
    return None, "let this user write under target.warehouse, or set target.state_root to a folder it can write"


_PASSED: set[tuple[str, ...]] = set()  # the places (and credentials) this process found writable


def _passed_key(pipeline: Pipeline) -> tuple[str, ...]:
    """The places of ``pipeline`` and who writes them (the endpoint, a digest of the keys): a test passed for
    these holds for the process."""
    target = pipeline.cfg.target
    who = ("local",)
    if target.s3 is not None:
        who = (target.s3.endpoint, hashlib.sha256("\0".join(s3_credentials(target)).encode()).hexdigest())
    return (*who, *(p.uri for p in run_places(pipeline.cfg, pipeline.state.root)))


def ensure_writable(pipeline: Pipeline) -> None:
    """:func:`check_writable`, once per process for the same places and credentials: at the start of every run,
    before the catalog, the broker or Spark."""
    if _passed_key(pipeline) not in _PASSED:
        check_writable(pipeline)
