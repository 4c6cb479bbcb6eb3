"""``tailfill maintain``: table upkeep that keeps commits fast and the offset proof intact.

For the data table and the quarantine table, in this order: compact small files into files of the
target size (offsets kept), expire snapshots beyond the retention (their batch audit archived
first), delete orphaned files older than the safety age. Each step commits through optimistic
concurrency and retries conflicts, so it can run beside a tail and a backfill that are committing.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from tailfill.config import MaintenanceConfig, PipelineConfig, duration_seconds
from tailfill.errors import ConfigError
from tailfill.lake.compact import compact
from tailfill.lake.expire import expire
from tailfill.lake.orphans import remove_orphans
from tailfill.lake.storage import filesystem
from tailfill.lake.tables import ensure_tables


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


def maintain(cfg: PipelineConfig, settings: MaintenanceConfig) -> dict:
    """Compact, expire and clean both tables of ``cfg``; returns what each step did per table."""
    started = time.perf_counter()
    fs = filesystem(cfg.target)
    older_than = datetime.now(UTC) - timedelta(seconds=duration_seconds(settings.expire_older_than))
    report: dict = {"pipeline": cfg.name, "settings": settings.model_dump(), "tables": []}
    for table in ensure_tables(cfg):
        compacted = compact(table, fs, settings.target_file_bytes)
        expired = expire(table, fs, older_than, settings.keep_last)
        orphans = remove_orphans(table, fs, duration_seconds(settings.orphan_min_age))
        report["tables"].append({"table": ".".join(table.name()), "compaction": compacted.to_dict(),
                                 "expiry": expired.to_dict(), "orphans": orphans.to_dict()})
    report["seconds"] = round(time.perf_counter() - started, 3)
    return report
