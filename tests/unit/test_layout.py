"""The package's layout rules, read from the code's own imports (ast, nothing imported).

Every import is read: at module level, inside functions, and under ``if TYPE_CHECKING``.

- the house has floors (:data:`FLOORS`): a module imports modules of its own package and of lower
  floors only; packages that share a floor never import each other;
- the modules of ``tailfill`` and ``plugins`` import each other without a cycle;
- a format is known by name only to the registry of formats and the edge (``pipeline``): ``lake`` and
  the rest see its interface (``formats.base``);
- pyspark is imported at module level only by Spark-side modules, named ``spark_*``;
- nothing in ``tailfill`` imports Airflow;
- the top of the package stays a small model: at most 8 modules directly under ``tailfill/``;
- production code never imports the development tools in ``tailfill.dev`` (the embedded broker,
  sample data, a local Postgres, the registry's compatibility rules): only ``tailfill.dev`` itself and
  the CLI's dev commands do.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "tailfill"
PLUGINS = REPO / "plugins"

# Lowest first. A module may import its own package's modules and any module of a lower floor.
# Packages named on one floor are rooms side by side: neither imports the other.
FLOORS: list[list[str]] = [
    ["tailfill.__init__", "tailfill.errors", "tailfill.offsets", "tailfill.redact"],  # the small model
    ["tailfill.settings"],  # the environment's settings, typed
    ["tailfill.values"],  # value types: record shapes, column types, partition terms, freshness
    ["tailfill.config"],  # the pipeline YAML's models
    ["tailfill.plumbing"],  # retries, whole writes, locks, the warehouse's filesystem, detached processes
    ["tailfill.failpoints"],  # where tests make the code fail or pause
    ["tailfill.formats", "tailfill.source", "tailfill.state"],  # records decoded; Kafka read; shared run state
    ["tailfill.lake"],  # tables, the two-phase commit and its ledger
    ["tailfill.pipeline"],  # the edge: a pipeline resolved once, for the driver and for executors
    ["tailfill.proof", "tailfill.upkeep"],  # the completeness proof; table upkeep
    ["tailfill.run"],  # planning and running the Spark job
    ["tailfill.dev"],  # development tools: embedded services, sample data, failpoints' files
    ["tailfill.cli", "tailfill_airflow", "tailfill.spark_jobs"],  # the faces
    ["tailfill_plugin"],  # the Airflow plugin's entry: the plugin's pages
]


def _name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    """Every module of ``tailfill`` and of the Airflow plugin, by its dotted name."""
    out = {_name(p, REPO): p for p in PACKAGE.rglob("*.py")}
    out |= {_name(p, PLUGINS): p for p in PLUGINS.rglob("*.py")}
    return out


def module_level_imports(path: Path) -> set[str]:
    """Modules imported at module level (outside functions and classes)."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        names |= _imported(node)
    return names


def all_imports(path: Path) -> set[str]:
    """Every module ``path`` imports, wherever the import stands (a function's body included)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names |= _imported(node)
    return names


def _imported(node: ast.AST) -> set[str]:
    if isinstance(node, ast.Import):
        return {a.name for a in node.names}
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        return {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
    return set()


def internal_imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Each module's imports of other modules of the house (``from a import b`` is ``a.b`` if b is a module)."""
    return {name: {m for m in all_imports(path) if m in mods and m != name} for name, path in mods.items()}


def _ours(name: str) -> bool:
    """A module of the ``tailfill`` package (not of the Airflow plugin)."""
    return name == "tailfill" or name.startswith("tailfill.")


def floor_of(module: str) -> tuple[int, str]:
    """(floor number, package) of ``module``: the longest prefix :data:`FLOORS` names."""
    module = "tailfill.__init__" if module == "tailfill" else module  # the package's own face
    found = [(len(prefix), i, prefix) for i, floor in enumerate(FLOORS) for prefix in floor
             if module == prefix or module.startswith(prefix + ".")]
    assert found, f"{module} stands on no floor: add its package to FLOORS"
    _, i, prefix = max(found)
    return i, prefix


def test_every_module_stands_on_a_floor():
    for name in modules():
        floor_of(name)


def test_imports_go_down_the_floors_never_up_or_sideways():
    offenders = []
    for name, imported in internal_imports(modules()).items():
        floor, package = floor_of(name)
        for other in sorted(imported):
            their_floor, their_package = floor_of(other)
            if their_package != package and their_floor >= floor:
                way = "sideways" if their_floor == floor else "up"
                offenders.append(f"{name} -> {other} ({way})")
    assert offenders == []


def test_no_import_cycles():
    graph = internal_imports(modules())
    # An edge to a package is an edge to its face only (an __init__ that imports nothing).
    visiting, done, cycles = set(), set(), []

    def visit(node: str, trail: list[str]) -> None:
        if node in done:
            return
        if node in visiting:
            cycles.append([*trail[trail.index(node):], node])
            return
        visiting.add(node)
        for nxt in sorted(graph[node]):
            visit(nxt, [*trail, node])
        visiting.discard(node)
        done.add(node)

    for name in sorted(graph):
        visit(name, [])
    assert cycles == []


FORMAT_INTERFACE = {"tailfill.formats.base", "tailfill.formats.evolve"}  # what a format is; the rules of evolution


def test_only_the_registry_and_the_edge_know_the_formats_by_name():
    """The lake (and everything else past the edge) sees a format through its interface only: adding one
    changes its own module and the registry's one line, nothing in ``lake/``."""
    knows_names = {"tailfill.formats", "tailfill.pipeline", "tailfill.dev"}
    offenders = sorted(f"{name} -> {m}" for name, imported in internal_imports(modules()).items()
                       if _ours(name) and not any(name.startswith(p) for p in knows_names)
                       for m in imported if m.startswith("tailfill.formats.") and m not in FORMAT_INTERFACE)
    assert offenders == []


def test_every_package_has_a_face():
    """Executors import tailfill from a zip (``--py-files``), and zipimport finds no package without ``__init__``."""
    folders = {p.parent for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts}
    assert sorted(str(f.relative_to(REPO)) for f in folders if not (f / "__init__.py").exists()) == []


def test_package_faces_import_nothing_of_the_house():
    """A package's ``__init__`` only describes it: importing one module never runs another's code."""
    mods = modules()
    faces = {name: path for name, path in mods.items() if path.name == "__init__.py" and _ours(name)}
    assert {n: sorted(m for m in all_imports(p) if m in mods) for n, p in faces.items() if
            any(m in mods for m in all_imports(p))} == {}


def test_pyspark_only_at_module_level_of_spark_modules():
    offenders = sorted(name for name, path in modules().items()
                       if _ours(name) and not path.stem.startswith("spark_")
                       and any(m.split(".")[0] == "pyspark" for m in module_level_imports(path)))
    assert offenders == []


def test_no_airflow_anywhere_in_the_package():
    offenders = sorted(name for name, path in modules().items() if name.startswith("tailfill.")
                       and any(m.split(".")[0] == "airflow" for m in all_imports(path)))
    assert offenders == []


def test_the_top_of_the_package_is_a_small_model():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= 8, top


DEV_USERS = {"tailfill.cli"}  # `tailfill broker up|down`, `produce-sample`, `demo`


def test_production_code_never_imports_the_development_tools():
    offenders = sorted(name for name, path in modules().items()
                       if _ours(name) and not name.startswith("tailfill.dev")
                       and name not in DEV_USERS
                       and any(m == "tailfill.dev" or m.startswith("tailfill.dev.") for m in all_imports(path)))
    assert offenders == []


def test_the_scanners_see_the_imports_the_rules_judge():
    """The rules above pass on an empty scan: the scanners must find what is known to be there."""
    mods = modules()
    assert {"tailfill", "tailfill.lake.commit", "tailfill_airflow.operators"} <= set(mods) and len(mods) > 60
    assert "pyspark.sql" in module_level_imports(mods["tailfill.run.spark_session"])
    assert "airflow.sdk" in all_imports(mods["tailfill_airflow.dag_factory"])
    assert "tailfill.dev.broker" in all_imports(mods["tailfill.cli"])
    # a function-level import counts (the cli imports the proof inside its command)
    assert "tailfill.proof.validate" in internal_imports(mods)["tailfill.cli"]
    assert floor_of("tailfill.lake.commit") > floor_of("tailfill.formats.evolve") > floor_of("tailfill.config")
