"""Where the shared run state lives, and the one way it is written: whole objects, never appends.

One folder per pipeline on the warehouse's filesystem, ``<warehouse>/_tailfill/<pipeline>/`` by
default or ``<target.state_root>/<pipeline>/``::

    tail/health.json                         TailHealth: rewritten after every tail batch and heartbeat
    tail/stop.json                           StopRequest: `tailfill stop-tail`; removed by the tail
    tail/claims/<generation>.json            TailClaim: the running tail's host and pid (the highest generation)
    failures/<ms>-<id>.json                  FailureRecord: one object per failed task or missed deadline
    runs/<run>/lane.json                     LaneRecord: an Airflow lane's label, plan and state
    runs/<run>/<query>/<batch>-<ms>.json     BatchReport: one object per committed micro-batch

S3 has no append, so a log is a folder of small objects read by listing. Every object is written
whole (:meth:`StateStore.put`): a local file by one rename, an S3 object by one PUT; a reader never
sees half a record.
"""

from __future__ import annotations

import contextlib
import functools
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs

from tailfill.config import PipelineConfig
from tailfill.plumbing.durable import create_whole, write_whole
from tailfill.plumbing.warehouse import filesystem, fs_path, s3_client
from tailfill.state.records import BatchReport, FailureRecord, LaneRecord, StopRequest, TailHealth

STATE_DIR = "_tailfill"  # beside the table's data in the warehouse, unless target.state_root says where


def state_root(cfg: PipelineConfig) -> str:
    """The pipeline's state folder: ``<target.state_root or <warehouse>/_tailfill>/<pipeline>``."""
    base = cfg.target.state_root or f"{cfg.target.warehouse.rstrip('/')}/{STATE_DIR}"
    if not base.startswith("s3://"):
        base = str(Path(base).absolute())
    return f"{base.rstrip('/')}/{cfg.name}"


class StateStore:
    """One pipeline's state folder: whole-object writes, reads, listings and deletes by relative key.

    Made once by the owner of the pipeline's handle (:meth:`of`) and handed to whatever reads or writes
    the state."""

    def __init__(self, root: str, fs: pafs.FileSystem, s3: Callable[[], Any] | None = None):
        self.root, self.fs, self._s3 = root, fs, s3  # s3: makes the client of conditional writes, when asked

    @classmethod
    def of(cls, cfg: PipelineConfig, fs: pafs.FileSystem | None = None) -> StateStore:
        """The state folder of ``cfg`` on ``fs`` (default: a filesystem of its warehouse, made here)."""
        s3 = functools.cache(lambda: s3_client(cfg.target)) if cfg.target.s3 is not None else None
        return cls(state_root(cfg), fs if fs is not None else filesystem(cfg.target), s3)

    def uri(self, key: str) -> str:
        return f"{self.root}/{key}"

    def put(self, key: str, text: str) -> None:
        """Write ``key`` whole: a reader sees the previous object or this one, never part of it."""
        write_whole(self.uri(key), text, self.fs)  # a local file by one rename, an S3 object by one PUT

    def create(self, key: str, text: str) -> bool:
        """Write ``key`` whole only if no object is there; True if this call made it (of two racing, one does)."""
        return create_whole(self.uri(key), text, self.fs, self._s3() if self._s3 is not None else None)

    def get(self, key: str) -> str | None:
        """The object's text, or None if there is none (any other failure to read is raised)."""
        try:
            with self.fs.open_input_stream(fs_path(self.uri(key))) as f:
                return f.read().decode()
        except FileNotFoundError:
            return None

    def list(self, key: str) -> list[pafs.FileInfo]:
        """What is directly inside the folder ``key`` (nothing if it does not exist), by name; hidden
        names (a local write's temporary file) are not listed."""
        infos = self.fs.get_file_info(pafs.FileSelector(fs_path(self.uri(key)), allow_not_found=True))
        return sorted((i for i in infos if not i.base_name.startswith(".")), key=lambda i: i.base_name)

    def delete(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.delete_file(fs_path(self.uri(key)))


# --- the tail ---------------------------------------------------------------------------------------

HEALTH, STOP = "tail/health.json", "tail/stop.json"


def write_health(store: StateStore, health: TailHealth) -> None:
    store.put(HEALTH, health.to_json())


def read_health(store: StateStore) -> TailHealth | None:
    """The tail's last published health; None if no tail has published any to this state root.

    A failure to reach or parse the state is raised: the caller says so (never a silent None).
    """
    text = store.get(HEALTH)
    return TailHealth.from_json(text) if text is not None else None


def request_stop(store: StateStore) -> None:
    store.put(STOP, StopRequest(at=time.time()).to_json())


def stop_requested(store: StateStore) -> bool:
    return store.get(STOP) is not None


def clear_stop(store: StateStore) -> None:
    store.delete(STOP)


# --- batch reports ----------------------------------------------------------------------------------

RUNS = "runs"  # one folder per run: its lane record, its queries' batch reports


def _run_key(run_id: str) -> str:
    return f"{RUNS}/{run_id}"


class ReportLog:
    """The batch reports of one query of one run: one object per committed micro-batch.

    An object is never rewritten (its name holds the batch id and the commit time), so each is
    fetched once per ``ReportLog``: a watcher that reads again only fetches the new ones.
    """

    def __init__(self, store: StateStore, run_id: str, query: str):
        self.store, self.run_id, self.key = store, run_id, f"{_run_key(run_id)}/{query}"
        self._read: dict[str, BatchReport] = {}

    def __str__(self) -> str:
        return self.store.uri(self.key)

    def append(self, report: BatchReport) -> None:
        # The commit time in the name: a retry of a batch (a replay after a crash) adds its own report.
        self.store.put(f"{self.key}/{report.batch_id:08d}-{round(report.at * 1000):013d}.json", report.to_json())

    def names(self) -> list[str]:
        return [i.base_name for i in self.store.list(self.key) if i.is_file and i.base_name.endswith(".json")]

    def read(self) -> list[BatchReport]:
        """The reports, oldest batch first."""
        for name in self.names():
            if name not in self._read and (text := self.store.get(f"{self.key}/{name}")) is not None:
                self._read[name] = BatchReport.from_json(text)
        return [self._read[name] for name in sorted(self._read)]

    def last_at(self) -> float | None:
        """When the last report was written (from the names alone), or None without any."""
        names = self.names()
        return int(names[-1].removesuffix(".json").rpartition("-")[2]) / 1000 if names else None


def report_file(store: StateStore, run_id: str, query: str) -> ReportLog:
    """The report log of one query of one run (a backfill run has one query per run of adjacent slices)."""
    return ReportLog(store, run_id, query)


def run_queries(store: StateStore, run_id: str) -> list[ReportLog]:
    """The report logs of every query of a run."""
    infos = store.list(_run_key(run_id))
    return [ReportLog(store, run_id, i.base_name) for i in infos if i.type == pafs.FileType.Directory]


class RunReports:
    """Every batch report of one run, all its queries, read again as often as asked (each object once)."""

    def __init__(self, store: StateStore, run_id: str):
        self.store, self.run_id = store, run_id
        self._logs: dict[str, ReportLog] = {}

    def read(self) -> list[BatchReport]:
        """Oldest commit first."""
        for log in run_queries(self.store, self.run_id):
            self._logs.setdefault(log.key, log)
        return sorted((r for log in self._logs.values() for r in log.read()), key=lambda r: r.at)


def run_reports(store: StateStore, run_id: str) -> list[BatchReport]:
    """Every batch report of a run (all its queries), oldest commit first."""
    return RunReports(store, run_id).read()


def run_exists(store: StateStore, run_id: str) -> bool:
    return bool(store.list(_run_key(run_id)))


def run_ids(store: StateStore) -> list[str]:
    """Every run with state, by name."""
    return [i.base_name for i in store.list(RUNS) if i.type == pafs.FileType.Directory]


def recent_reports(store: StateStore, queries: int) -> list[BatchReport]:
    """The batch reports of the ``queries`` report logs most recently written to, of any run.

    Chosen by their objects' names (listings only); only the chosen ones are read.
    """
    logs = [(at, log) for run in run_ids(store) for log in run_queries(store, run)
            if (at := log.last_at()) is not None]
    return [r for _, log in sorted(logs, key=lambda x: x[0])[-queries:] for r in log.read()]


# --- Airflow lanes and failures ---------------------------------------------------------------------

def write_lane(store: StateStore, run_id: str, **changes) -> None:
    """Merge ``changes`` into the run's lane record."""
    lane = read_lane(store, run_id) or LaneRecord()
    store.put(f"{_run_key(run_id)}/lane.json", lane.merged(**changes).to_json())


def read_lane(store: StateStore, run_id: str) -> LaneRecord | None:
    text = store.get(f"{_run_key(run_id)}/lane.json")
    return LaneRecord.from_json(text) if text is not None else None


def record_failure(store: StateStore, failure: FailureRecord) -> None:
    store.put(f"failures/{round(failure.at * 1000):013d}-{uuid.uuid4().hex[:8]}.json", failure.to_json())


def read_failures(store: StateStore) -> list[FailureRecord]:
    """The pipeline's recorded failures, oldest first."""
    return [FailureRecord.from_json(text) for i in store.list("failures")
            if (text := store.get(f"failures/{i.base_name}")) is not None]
