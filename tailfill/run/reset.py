"""A clean start for one pipeline: its tables (a keyed one's state table too), run state, validation results and
checkpoints removed.

:func:`reset_targets` says what a reset would remove (the command line shows it and asks first);
:func:`reset` removes it. A pipeline whose tail is running is refused: stop the tail first. The
broker's topic is not touched.
"""

from __future__ import annotations

import contextlib
import shutil
from dataclasses import dataclass
from pathlib import Path

import pyarrow.fs as pafs
from pyiceberg.exceptions import NoSuchTableError

from tailfill.errors import TailfillError
from tailfill.pipeline.handle import Pipeline
from tailfill.plumbing.warehouse import fs_path
from tailfill.proof.reports import gx_root, results_uri
from tailfill.run.plan import checkpoint_root
from tailfill.state.store import read_health


@dataclass(frozen=True)
class ResetTargets:
    """What a reset of one pipeline removes."""

    tables: list[str]  # namespace.table of the data, quarantine and (keyed) state tables that exist
    folders: list[str]  # state root, validation results (on the warehouse's filesystem)
    local: list[Path]  # checkpoints and local validation projects that exist

    def lines(self) -> list[str]:
        return ([f"table {t} (its rows and files)" for t in self.tables]
                + [f"folder {f}" for f in self.folders] + [f"folder {p}" for p in self.local])


def reset_targets(pipeline: Pipeline) -> ResetTargets:
    """What :func:`reset` would remove for ``pipeline`` now (only what exists). A keyed pipeline's state table goes
    with its change log: the applied ranges it records would otherwise disagree with the emptied data table."""
    cfg, target = pipeline.cfg, pipeline.cfg.target
    own = (target.table, target.quarantine_name, *([target.state_name] if pipeline.keyed else []))
    names = [f"{target.namespace}.{name}" for name in own]
    tables = [n for n in names if pipeline.catalog.table_exists(tuple(n.split(".", 1)))]
    folders = [f for f in (pipeline.state.root, results_uri(cfg)) if _exists(pipeline.fs, f)]
    on_fs = {fs_path(f) for f in folders}  # a local warehouse's validation folder is also its Data Docs' folder
    local = [p for p in (checkpoint_root(cfg, "backfill").parent, gx_root(cfg)) if p.exists() and str(p) not in on_fs]
    return ResetTargets(tables, folders, local)


def reset(pipeline: Pipeline, targets: ResetTargets) -> None:
    """Remove ``targets`` (from :func:`reset_targets`); refused while the pipeline's tail runs."""
    health = read_health(pipeline.state)
    if health is not None and health.live():
        raise TailfillError(f"the tail of {pipeline.name} is running: not resetting under it "
                            f"(fix: `tailfill stop-tail {pipeline.name}`, then reset)")
    for name in targets.tables:
        with contextlib.suppress(NoSuchTableError):  # gone since it was listed: what a reset wants
            pipeline.catalog.purge_table(tuple(name.split(".", 1)))
    for folder in targets.folders:
        if _exists(pipeline.fs, folder):
            pipeline.fs.delete_dir(fs_path(folder))
    for path in targets.local:
        shutil.rmtree(path, ignore_errors=False)


def _exists(fs: pafs.FileSystem, uri: str) -> bool:
    return fs.get_file_info(fs_path(uri)).type != pafs.FileType.NotFound
