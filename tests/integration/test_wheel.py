"""The package a user installs: a wheel built the way ``pip install .`` builds it (not editable).

Every module of the source tree and every shipped data file must be in it, and it must work on its
own: each module imports from the installed wheel (never from this checkout), the data files are
found where the code looks for them, and the code archive shipped to Spark's executors, built from
that install, holds the same modules as one built from the checkout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MAPPED = {"tailfill/spark_jobs": REPO / "spark_jobs", "tailfill/proof/suites": REPO / "expectations"}


def source_files() -> set[str]:
    """What the wheel must hold, by its path inside the wheel: modules and the shipped data files."""
    names = {p.relative_to(REPO).as_posix() for p in (REPO / "tailfill").rglob("*") if p.is_file()
             and "__pycache__" not in p.parts}
    for inside, folder in MAPPED.items():
        names |= {f"{inside}/{p.name}" for p in folder.iterdir()
                  if p.is_file() and p.suffix in (".py", ".json", ".properties")}
    return names


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The wheel of this checkout, built non-editable in a copy of the tree, installed into a folder of its own."""
    root = tmp_path_factory.mktemp("wheel")
    tree = root / "src"
    # The files of this checkout, committed or not, without what git ignores (.venv, .tailfill, caches).
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=REPO,
                            check=True, capture_output=True, text=True).stdout.split("\0")
    for name in filter(None, listed):
        if (REPO / name).is_file():
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, tree / name)
    dist = root / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(dist), str(tree)],
                   check=True, capture_output=True)
    [wheel] = dist.glob("tailfill-*.whl")
    target = root / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                    str(wheel)], check=True, capture_output=True)
    return target


# The development install's import hook (``pip install -e``) would quietly supply any module the wheel
# lacks from this checkout: the Pythons below run without it.
NO_CHECKOUT = ("import sys\n"
               "sys.meta_path[:] = [f for f in sys.meta_path if '__editable__' not in getattr(f, '__module__', '')]\n")


def run_installed(target: Path, code: str, tmp_path: Path) -> dict:
    """Run ``code`` in a Python whose ``tailfill`` is the installed wheel's; it prints one JSON line."""
    prelude = (NO_CHECKOUT + f"sys.path.insert(0, {str(target)!r})\n"
               "import tailfill\n"
               f"assert tailfill.__file__.startswith({str(target)!r}), tailfill.__file__\n")
    env = {**os.environ, "TAILFILL_HOME": str(tmp_path / "home"), "PYTHONPATH": ""}
    out = subprocess.run([sys.executable, "-c", prelude + code], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_wheel_holds_every_module_and_data_file(installed):
    in_wheel = {p.relative_to(installed).as_posix() for p in (installed / "tailfill").rglob("*")
                if p.is_file() and "__pycache__" not in p.parts}
    missing = sorted(source_files() - in_wheel)
    assert missing == []


def test_every_module_imports_from_the_wheel_alone_with_its_data(installed, tmp_path):
    found = run_installed(installed, f"""
import importlib, json, pkgutil, sys
names = sorted(m.name for m in pkgutil.walk_packages(tailfill.__path__, "tailfill."))
outside = [n for n in names if not importlib.import_module(n).__file__.startswith({str(installed)!r})]
sys.path.append({str(REPO / "plugins")!r})  # the Airflow plugin runs on the wheel's tailfill
import tailfill_airflow.operators
from tailfill.run import runtime
from tailfill.proof import data_docs, expectations
print(json.dumps({{"modules": names, "outside": outside,
                  "job": str(runtime.job_file()), "log4j": str(runtime.log4j_file()),
                  "suite": sorted(expectations.suite_spec("run_completeness")),
                  "assets": sorted(p.name for p in data_docs.assets_dir().iterdir())}}))
""", tmp_path)
    assert found["outside"] == []
    assert {"tailfill.state.store", "tailfill.upkeep.compact", "tailfill.run.spark_ingest", "tailfill.cli",
            "tailfill.spark_jobs.ingest", "tailfill.proof.suites"} <= set(found["modules"])
    for shipped in ("job", "log4j"):
        assert found[shipped].startswith(str(installed)) and Path(found[shipped]).is_file()
    assert found["suite"]  # the GE suite's JSON was read from the wheel
    assert {"css", "js", "webfonts", "NOTICE.md"} <= set(found["assets"])


def test_the_code_archive_from_the_wheel_holds_what_a_checkout_s_holds(installed, tmp_path):
    from tailfill.run import runtime

    from_checkout = runtime.code_archive(tmp_path / "checkout.zip")
    found = run_installed(installed, f"""
import json
from tailfill.run import runtime
print(json.dumps({{"archive": str(runtime.code_archive(__import__("pathlib").Path({str(tmp_path / "wheel.zip")!r})))}}))
""", tmp_path)
    with zipfile.ZipFile(from_checkout) as a, zipfile.ZipFile(found["archive"]) as b:
        checkout_names, wheel_names = set(a.namelist()), set(b.namelist())
    assert wheel_names == checkout_names
    assert {"tailfill/state/store.py", "tailfill/upkeep/orphans.pyc", "tailfill/spark_jobs/ingest.py"} <= wheel_names
    # Executors import from the archive alone: every module of it, with the archive first on the path.
    code = (NO_CHECKOUT + "import importlib, json, pkgutil\n"
            f"sys.path.insert(0, {found['archive']!r})\n"
            "import tailfill\n"
            "names = [m.name for m in pkgutil.walk_packages(tailfill.__path__, 'tailfill.')]\n"
            "bad = [n for n in names if not importlib.import_module(n).__file__.startswith(sys.path[0])]\n"
            "print(json.dumps({'modules': len(names), 'bad': bad}))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "TAILFILL_HOME": str(tmp_path / "home")})
    assert out.returncode == 0, out.stderr[-3000:]
    imported = json.loads(out.stdout.strip().splitlines()[-1])
    assert imported["bad"] == [] and imported["modules"] > 50
