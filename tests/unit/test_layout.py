"""The package's layout rules, read from the code's own imports (ast, nothing imported).

- pyspark is imported at module level only by Spark-side modules, named ``spark_*``;
- nothing in ``tailfill`` imports Airflow;
- the modules of ``tailfill`` import each other without a cycle;
- the top of the package stays a small model: at most 8 modules directly under ``tailfill/``;
- production code never imports the development tools in ``tailfill.dev`` (the embedded broker,
  sample data, a local Postgres): only ``tailfill.dev`` itself and the CLI's dev commands do.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "tailfill"


def modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def module_level_imports(path: Path) -> set[str]:
    """Modules imported at module level (function bodies excluded: those are deferred on purpose)."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names |= {f"{node.module}.{a.name}" for a in node.names}
    return names


def all_imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_pyspark_only_at_module_level_of_spark_modules():
    offenders = sorted(name for name, path in modules().items()
                       if not path.stem.startswith("spark_")
                       and any(m.split(".")[0] == "pyspark" for m in module_level_imports(path)))
    assert offenders == []


def test_no_airflow_anywhere_in_the_package():
    offenders = sorted(name for name, path in modules().items()
                       if any(m.split(".")[0] == "airflow" for m in all_imports(path)))
    assert offenders == []


def test_no_import_cycles():
    mods = modules()
    graph = {name: {m for m in module_level_imports(path) if m in mods and m != name}
             for name, path in mods.items()}
    # A package's __init__ imports nothing here, so an edge to a package is an edge to its face only.
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


def test_the_top_of_the_package_is_a_small_model():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= 8, top


DEV_USERS = {"tailfill.cli"}  # `tailfill broker up|down`, `produce-sample`, `demo`


def test_production_code_never_imports_the_development_tools():
    offenders = sorted(name for name, path in modules().items()
                       if not name.startswith("tailfill.dev") and name not in DEV_USERS
                       and any(m == "tailfill.dev" or m.startswith("tailfill.dev.") for m in all_imports(path)))
    assert offenders == []


def test_the_scanners_see_the_imports_the_rules_judge():
    """The rules above pass on an empty scan: the scanners must find what is known to be there."""
    mods = modules()
    assert {"tailfill", "tailfill.run.spark_ingest", "tailfill.lake.commit"} <= set(mods) and len(mods) > 30
    assert "pyspark.sql" in module_level_imports(mods["tailfill.run.spark_ingest"])
    assert "tailfill.lake.commit" in module_level_imports(mods["tailfill.run.spark_ingest"])
    assert "airflow.sdk" in all_imports(PACKAGE.parent / "plugins" / "tailfill_airflow" / "dag_factory.py")
    assert "tailfill.dev.broker" in all_imports(mods["tailfill.cli"])
