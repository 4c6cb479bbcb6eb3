"""``tailfill maintain``: table upkeep that keeps commits fast and the offset proof intact.

For the data table, the quarantine table and a keyed pipeline's state table, in this order: compact
small files into files of the target size (offsets kept; the state's with its deletes applied and its
key index rebased), expire snapshots beyond the retention (their batch audit archived first), delete
orphaned files older than the safety age. Each step commits through optimistic
concurrency and retries conflicts, so it can run beside a tail and a backfill that are committing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from tailfill.config import MaintenanceConfig, PipelineConfig, duration_seconds
from tailfill.errors import ConfigError
from tailfill.lake.audit_log import audit_log
from tailfill.pipeline.handle import Pipeline
from tailfill.upkeep.compact import CompactionResult, compact
from tailfill.upkeep.expire import ExpiryResult, expire
from tailfill.upkeep.orphans import OrphanResult, remove_orphans
from tailfill.upkeep.state_compact import compact_state


def maintenance_settings(cfg: PipelineConfig, expire_older_than: str | None = None,
                         keep_last: int | None = None) -> MaintenanceConfig:
    """The pipeline's ``maintenance:`` block, with the command line's overrides applied."""
    if cfg.maintenance is None:
        raise ConfigError(f"{cfg.path or cfg.name}: maintenance: not set (fix: add a maintenance block with "
                          "target_file_bytes, expire_older_than, keep_last, orphan_min_age and schedule)")
    changes: dict[str, object] = {}
    if expire_older_than is not None:
        try:
            duration_seconds(expire_older_than)
        except ValueError as exc:
            raise ConfigError(f"--expire-older-than: {exc}") from None
        changes["expire_older_than"] = expire_older_than
    if keep_last is not None:
        if keep_last < 1:
            raise ConfigError("--keep-last: must be at least 1 (the current snapshot is always kept)")
        changes["keep_last"] = keep_last
    return cfg.maintenance.model_copy(update=changes)


@dataclass(frozen=True)
class TableUpkeep:
    """What compaction, expiry and the orphan cleanup did to one table."""

    table: str
    compaction: CompactionResult
    expiry: ExpiryResult
    orphans: OrphanResult

    def asdict(self) -> dict:
        return {"table": self.table, "compaction": self.compaction.to_dict(), "expiry": self.expiry.to_dict(),
                "orphans": self.orphans.to_dict()}

    def asstr(self) -> str:
        c, e, o = self.compaction, self.expiry, self.orphans
        return (f"{self.table}: compacted {c.files_removed} files into {c.files_added} ({c.data_files} data files, "
                f"{c.data_bytes:,} B live); expired {e.expired} snapshots ({e.archived} batch audits archived, "
                f"{e.snapshots_left} left); removed {len(o.deleted)} orphaned files ({o.deleted_bytes:,} B, "
                f"{o.kept_too_young} too young to remove)")


@dataclass
class MaintenanceResult:
    """One upkeep of a pipeline's tables: ``asdict()`` for machines (the DAG's XCom), ``asstr()`` for people."""

    pipeline: str
    settings: MaintenanceConfig
    tables: list[TableUpkeep] = field(default_factory=list)
    seconds: float = 0.0

    def asdict(self) -> dict:
        return {"pipeline": self.pipeline, "settings": self.settings.model_dump(),
                "tables": [t.asdict() for t in self.tables], "seconds": self.seconds}

    def asstr(self) -> str:
        s = self.settings
        head = (f"maintenance of {self.pipeline} (target file {s.target_file_bytes:,} B, expire older than "
                f"{s.expire_older_than} keeping the last {s.keep_last}, orphans older than {s.orphan_min_age}) "
                f"in {self.seconds:.1f}s")
        return "\n".join([head, *(f"  {t.asstr()}" for t in self.tables)])


def maintain(pipeline: Pipeline, settings: MaintenanceConfig, orphans: bool = True) -> MaintenanceResult:
    """Compact, expire and (``orphans``) clean both tables of ``pipeline``; returns what each step did per table
    (none when the tables were never made: there is nothing to keep up yet)."""
    started = time.perf_counter()
    fs = pipeline.fs
    older_than = datetime.now(UTC) - timedelta(seconds=duration_seconds(settings.expire_older_than))
    result = MaintenanceResult(pipeline.name, settings)
    tables = pipeline.open_tables()
    state = pipeline.open_state_table() if tables is not None else None
    for table in [*(tables or ()), *([state] if state is not None else [])]:
        if table is state:  # its deletes applied, sorted by key, the key index rebased
            compacted = compact_state(table, fs, pipeline.cfg.target.key, settings.target_file_bytes)
        else:
            compacted = compact(table, fs, settings.target_file_bytes)
        expired = expire(table, audit_log(pipeline.state, table), older_than, settings.keep_last)
        cleaned = (remove_orphans(table, fs, duration_seconds(settings.orphan_min_age)) if orphans
                   else OrphanResult(".".join(table.name()), 0, [], 0, 0))
        result.tables.append(TableUpkeep(".".join(table.name()), compacted, expired, cleaned))
    result.seconds = round(time.perf_counter() - started, 3)
    return result
