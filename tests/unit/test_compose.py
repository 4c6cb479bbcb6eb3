"""docker-compose.yml, checked statically: no Docker engine here, so nothing else would catch it.

The compose file is parsed with PyYAML (anchors and merge keys resolved as Compose resolves them)
and checked against itself (references, volumes, healthchecks, ports) and against the Python side:
the compose pipeline loads with :func:`tailfill.config.load_pipeline` in the environment the
Airflow containers get, and every endpoint it yields is a service of the stack, on the port that
service listens on, with the credentials, bucket and database the stack creates. Every failure
names the service and the variable.
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml
from sqlalchemy.engine import make_url

from tailfill.pipeline.load import load_pipeline

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yml"
REPO_MOUNT = PurePosixPath("/opt/tailfill")
AIRFLOW_ANCHOR = "x-airflow-common"
SPARK_ANCHOR = "x-spark-common"
AIRFLOW_COMMANDS = ("api-server", "scheduler", "dag-processor", "triggerer")

# What the Python side (DAGs, plugins, config) relies on, exactly.
AIRFLOW_CONTRACT = {
    "AIRFLOW__CORE__DAGS_FOLDER": "/opt/tailfill/dags",
    "AIRFLOW__CORE__PLUGINS_FOLDER": "/opt/tailfill/plugins",
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
    "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
    "AIRFLOW__CORE__AUTH_MANAGER": "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
    "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "postgresql+psycopg2://airflow:airflow@postgres:5432/airflow",
    "AIRFLOW_CONN_SPARK_DEFAULT": "spark://spark-master:7077",
    "TAILFILL_PIPELINES": "/opt/tailfill/deploy/compose/pipelines",
    "TAILFILL_HOME": "/var/lib/tailfill",
}
# Needed wherever tailfill code runs: Airflow containers (driver) and Spark containers (executors).
SHARED_CONTRACT = {
    "TAILFILL_BOOTSTRAP_SERVERS": "kafka:9092",
    "TAILFILL_CATALOG_URI": "postgresql+psycopg2://tailfill:tailfill@postgres:5432/iceberg",
    "TAILFILL_S3_ENDPOINT": "http://minio:9000",
    "AWS_EC2_METADATA_DISABLED": "true",
    "PYSPARK_PYTHON": "python3",
}
CREDENTIAL_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


def fail_on(problems: list[str]) -> None:
    assert not problems, "docker-compose.yml:\n  " + "\n  ".join(problems)


# ---------------------------------------------------------------------------------------- parsing


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    assert COMPOSE_FILE.is_file(), f"{COMPOSE_FILE} is missing"
    data = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(data, dict) and isinstance(data.get("services"), dict), "no 'services' mapping"
    return data


@pytest.fixture(scope="module")
def services(compose) -> dict[str, dict[str, Any]]:
    return compose["services"]


def _anchored(anchor_key: str) -> list[str]:
    """Services whose mapping merges (``<<:``) the top-level extension ``anchor_key`` by alias."""
    root = yaml.compose(COMPOSE_FILE.read_text())
    top = {k.value: v for k, v in root.value}
    common = top.get(anchor_key)
    assert common is not None, f"no top-level '{anchor_key}' block to share"
    names = []
    for name_node, svc in top["services"].value:
        for key, value in svc.value:
            merged = value.value if isinstance(value, yaml.SequenceNode) else [value]
            if key.tag == "tag:yaml.org,2002:merge" and any(m is common for m in merged):
                names.append(name_node.value)
    return names


@pytest.fixture(scope="module")
def airflow_services(services) -> list[str]:
    names = _anchored(AIRFLOW_ANCHOR)
    assert names, f"no service merges {AIRFLOW_ANCHOR}"
    return names


@pytest.fixture(scope="module")
def spark_services(services) -> list[str]:
    names = _anchored(SPARK_ANCHOR)
    assert names, f"no service merges {SPARK_ANCHOR}"
    return names


def env(svc: dict[str, Any]) -> dict[str, Any]:
    raw = svc.get("environment") or {}
    if isinstance(raw, list):
        return dict(item.split("=", 1) if "=" in item else (item, None) for item in raw)
    return dict(raw)


def words(svc: dict[str, Any], key: str = "command") -> list[str]:
    raw = svc.get(key)
    if raw is None:
        return []
    return shlex.split(raw) if isinstance(raw, str) else [str(w) for w in raw]


def script(svc: dict[str, Any]) -> str:
    """Entrypoint and command as one string (for ``sh -c`` one-shots), with ``$$`` unescaped."""
    return " ".join(words(svc, "entrypoint") + words(svc)).replace("$$", "$")


def depends_on(svc: dict[str, Any]) -> dict[str, str]:
    raw = svc.get("depends_on") or {}
    if isinstance(raw, list):
        return dict.fromkeys(raw, "service_started")
    return {name: (spec or {}).get("condition", "service_started") for name, spec in raw.items()}


@dataclass(frozen=True)
class Mount:
    kind: str  # "bind" or "volume"
    source: str
    target: PurePosixPath
    read_only: bool


def mounts(svc: dict[str, Any]) -> list[Mount]:
    out = []
    for entry in svc.get("volumes") or []:
        if isinstance(entry, dict):
            kind, source, target = entry.get("type", "volume"), entry.get("source", ""), entry["target"]
            read_only = bool(entry.get("read_only"))
        else:
            parts = entry.split(":")
            source, target = (parts[0], parts[1]) if len(parts) > 1 else ("", parts[0])
            read_only = len(parts) > 2 and "ro" in parts[2].split(",")
            kind = "bind" if source.startswith((".", "/", "~")) else "volume"
        out.append(Mount(kind, source, PurePosixPath(target), read_only))
    return out


def mount_of(svc: dict[str, Any], container_path: str) -> Mount | None:
    """The mount a container path lies on (the deepest one)."""
    path = PurePosixPath(container_path)
    hits = [m for m in mounts(svc) if path == m.target or m.target in path.parents]
    return max(hits, key=lambda m: len(m.target.parts), default=None)


def repo_path(svc: dict[str, Any], container_path: str) -> Path | None:
    """Where a container path comes from in the repo, or None if it is not bind-mounted from it."""
    m = mount_of(svc, container_path)
    if m is None or m.kind != "bind" or m.source.startswith(("/", "~")):
        return None
    return (REPO / m.source / PurePosixPath(container_path).relative_to(m.target)).resolve()


def resolves(services: dict[str, dict[str, Any]], host: str | None) -> str | None:
    """The service a host name reaches on the compose network (service name or hostname)."""
    for name, svc in services.items():
        if host in (name, svc.get("hostname")):
            return name
    return None


def option(argv: list[str], *flags: str) -> str | None:
    for i, w in enumerate(argv):
        if w in flags and i + 1 < len(argv):
            return argv[i + 1]
        for f in flags:
            if w.startswith(f + "="):
                return w.split("=", 1)[1]
    return None


def with_command(services: dict[str, dict[str, Any]], needle: str) -> str:
    found = [n for n, s in services.items() if needle in script(s)]
    assert len(found) == 1, f"expected one service running {needle}, found {found or 'none'}"
    return found[0]


def init_databases(services: dict[str, dict[str, Any]]) -> dict[str, tuple[str | None, str | None]]:
    """Databases the postgres init script creates: name -> (owner, password) resolved from env."""
    pg = services["postgres"]
    scripts = [m for m in mounts(pg) if m.kind == "bind" and "docker-entrypoint-initdb.d" in str(m.target)]
    assert scripts, "postgres: no init script mounted into /docker-entrypoint-initdb.d"
    text = "\n".join((REPO / m.source).read_text() for m in scripts)
    pg_env = env(pg)
    psql_vars = {v: pg_env.get(e) for v, e in re.findall(r"--set=(\w+)=\"\$\{?(\w+)\}?\"", text)}
    passwords = {u: psql_vars.get(p) for u, p in re.findall(r"CREATE USER :\"(\w+)\" WITH PASSWORD :'(\w+)'", text)}
    dbs = {}
    for db, owner in re.findall(r"CREATE DATABASE \"?(\w+)\"? OWNER :\"(\w+)\"", text, flags=re.IGNORECASE):
        dbs[db] = (psql_vars.get(owner), passwords.get(owner))
    assert dbs, "postgres: the init script creates no database (CREATE DATABASE name OWNER :\"var\")"
    return dbs


def check_postgres_uri(services, where: str, uri: str, problems: list[str]) -> None:
    url = make_url(uri)
    dbs = init_databases(services)
    if resolves(services, url.host) != "postgres":
        problems.append(f"{where}: host {url.host!r} is not the postgres service")
    if (url.port or 5432) != 5432:
        problems.append(f"{where}: port {url.port} is not postgres' 5432")
    if url.database not in dbs:
        problems.append(f"{where}: database {url.database!r} is not created by the init script ({sorted(dbs)})")
    elif (url.username, url.password) != dbs[url.database]:
        problems.append(f"{where}: user/password {url.username}/{url.password} differ from the owner the init "
                        f"script creates for {url.database!r} {dbs[url.database]}")


# ------------------------------------------------------------------------------- self-consistency


def test_the_stack_has_its_services(services, airflow_services, spark_services):
    images = {"postgres": "postgres:16", "kafka": "apache/kafka", "minio": "minio/minio", "minio-init": "minio/mc"}
    problems = [f"{name}: image {services.get(name, {}).get('image')!r} is not {image}"
                for name, image in images.items()
                if not str(services.get(name, {}).get("image", "")).startswith(image)]
    problems += [f"{name}: missing (or does not merge {SPARK_ANCHOR})"
                 for name in ("spark-master", "spark-worker") if name not in spark_services]
    problems += [f"{name}: missing (or does not merge {AIRFLOW_ANCHOR})"
                 for name in ("airflow-init", "airflow-apiserver", "airflow-scheduler", "airflow-dag-processor",
                              "airflow-triggerer") if name not in airflow_services]
    fail_on(problems)


def test_references_name_defined_services(services):
    problems = []
    for name, svc in services.items():
        refs = [("depends_on", d) for d in depends_on(svc)]
        refs += [("links", link.split(":")[0]) for link in svc.get("links") or []]
        refs += [("volumes_from", v.split(":")[0]) for v in svc.get("volumes_from") or []]
        if str(svc.get("network_mode", "")).startswith("service:"):
            refs.append(("network_mode", svc["network_mode"].split(":", 1)[1]))
        if isinstance(svc.get("extends"), dict) and "file" not in svc["extends"]:
            refs.append(("extends", svc["extends"].get("service")))
        problems += [f"{name}: {key} names {ref!r}, which is not a service" for key, ref in refs if ref not in services]
    fail_on(problems)


def test_depends_on_conditions_can_be_met(services):
    problems = []
    for name, svc in services.items():
        for dep, condition in depends_on(svc).items():
            target = services.get(dep, {})
            checked = target.get("healthcheck") and not target["healthcheck"].get("disable")
            if condition == "service_healthy" and not checked:
                problems.append(f"{name}: waits for {dep} to be healthy, but {dep} has no healthcheck")
            if condition == "service_completed_successfully" and target.get("restart", "no") != "no":
                problems.append(f"{name}: waits for {dep} to complete, but {dep} restarts ({target['restart']})")
            if condition not in ("service_started", "service_healthy", "service_completed_successfully"):
                problems.append(f"{name}: depends_on {dep}: unknown condition {condition!r}")
    fail_on(problems)


def test_named_volumes_are_declared(compose, services):
    declared = set(compose.get("volumes") or {})
    problems = [f"{name}: volume {m.source!r} (at {m.target}) is not declared under top-level volumes"
                for name, svc in services.items() for m in mounts(svc) if m.kind == "volume" and m.source
                and m.source not in declared]
    fail_on(problems)


def test_bind_mounts_are_repo_paths_that_exist(services):
    problems = []
    for name, svc in services.items():
        for m in mounts(svc):
            if m.kind != "bind":
                continue
            host = (REPO / m.source).resolve()
            if m.source.startswith(("/", "~")) or not host.is_relative_to(REPO):
                problems.append(f"{name}: mounts {m.source!r}, outside the repo (not portable)")
            elif not host.exists():
                problems.append(f"{name}: mounts {m.source!r}, which does not exist in the repo")
    fail_on(problems)


def test_builds_exist_and_copy_what_exists(services):
    problems = []
    for name, svc in services.items():
        build = svc.get("build")
        if build is None:
            continue
        build = {"context": build} if isinstance(build, str) else build
        context = (REPO / build.get("context", ".")).resolve()
        dockerfile = context / build.get("dockerfile", "Dockerfile")
        if not context.is_dir():
            problems.append(f"{name}: build context {build.get('context')!r} is not a repo directory")
            continue
        if not dockerfile.is_file():
            problems.append(f"{name}: dockerfile {build.get('dockerfile')!r} does not exist")
            continue
        for line in dockerfile.read_text().splitlines():
            argv = line.split()
            if argv[:1] in (["COPY"], ["ADD"]) and not any(a.startswith("--from") for a in argv):
                sources = [a for a in argv[1:-1] if not a.startswith("--")]
                problems += [f"{name}: {dockerfile.relative_to(REPO)}: {argv[0]} source {s!r} is not in the context"
                             for s in sources if not (context / s).exists()]
    fail_on(problems)


def test_environment_values_are_strings(services):
    # YAML turns true/False/4 into bool/int; Compose rejects booleans, so quote every value.
    problems = [f"{name}: environment {var} = {value!r} is a {type(value).__name__}, quote it"
                for name, svc in services.items() for var, value in env(svc).items() if not isinstance(value, str)]
    fail_on(problems)


def test_ports_are_published_on_loopback_only(services):
    problems = []
    for name, svc in services.items():
        if svc.get("network_mode") == "host":
            problems.append(f"{name}: network_mode host publishes every port on every interface")
        for port in svc.get("ports") or []:
            if isinstance(port, dict):
                if port.get("published") is not None and port.get("host_ip") != "127.0.0.1":
                    problems.append(f"{name}: port {port} needs host_ip: 127.0.0.1")
            elif not re.fullmatch(r"127\.0\.0\.1:\d+(-\d+)?:\d+(-\d+)?(/(tcp|udp))?", str(port)):
                problems.append(f"{name}: port {port!r} must be published as \"127.0.0.1:HOST:CONTAINER\"")
    fail_on(problems)


# ---------------------------------------------------------------------------------------- Airflow


def image_differences(compose, services, names, anchor: str) -> list[str]:
    """Services among ``names`` whose image or build differs from the ``anchor`` block's."""
    common = compose[anchor]
    return [f"{name}: {key} {services[name].get(key)!r} differs from {anchor}'s {common.get(key)!r}"
            for name in names for key in ("image", "build") if services[name].get(key) != common.get(key)]


def test_airflow_services_share_one_image_and_environment(compose, services, airflow_services):
    common = compose[AIRFLOW_ANCHOR]
    problems = image_differences(compose, services, airflow_services, AIRFLOW_ANCHOR)
    for name in airflow_services:
        svc = services[name]
        for var, value in env(common).items():
            if env(svc).get(var) != value:
                problems.append(f"{name}: {var} = {env(svc).get(var)!r}, not the common {value!r}")
    found = {c for name in airflow_services for c in AIRFLOW_COMMANDS if words(services[name])[:2] == ["airflow", c]}
    problems += [f"no {AIRFLOW_ANCHOR} service runs `airflow {c}`" for c in AIRFLOW_COMMANDS if c not in found]
    init = services.get("airflow-init", {})
    if words(init)[:3] != ["airflow", "db", "migrate"] or init.get("restart", "no") != "no":
        problems.append("airflow-init: must be a one-shot `airflow db migrate` (restart: \"no\")")
    fail_on(problems)


def test_airflow_contract_values(services, airflow_services):
    problems = [f"{name}: {var} = {env(services[name]).get(var)!r}, the contract says {value!r}"
                for name in airflow_services for var, value in {**AIRFLOW_CONTRACT, **SHARED_CONTRACT}.items()
                if env(services[name]).get(var) != value]
    fail_on(problems)


def test_airflow_mounts_the_repo_read_only_and_the_state_volume(services, airflow_services):
    problems = []
    for name in airflow_services:
        svc = services[name]
        repo = mount_of(svc, str(REPO_MOUNT))
        if repo is None or repo.target != REPO_MOUNT or repo.kind != "bind" or (REPO / repo.source).resolve() != REPO:
            problems.append(f"{name}: the repo must be bind-mounted at {REPO_MOUNT}")
        elif not repo.read_only:
            problems.append(f"{name}: the repo mount at {REPO_MOUNT} must be read-only (:ro)")
        home = env(svc).get("TAILFILL_HOME", "")
        state = mount_of(svc, home)
        if state is None or state.kind != "volume" or state.target != PurePosixPath(home):
            problems.append(f"{name}: TAILFILL_HOME {home!r} must be a named volume mounted there")
    fail_on(problems)


@pytest.mark.parametrize(("var", "repo_dir", "must_hold"), [
    ("AIRFLOW__CORE__DAGS_FOLDER", "dags", None),
    ("AIRFLOW__CORE__PLUGINS_FOLDER", "plugins", None),
    ("TAILFILL_PIPELINES", "deploy/compose/pipelines", "demo.yaml"),
])
def test_airflow_folders_map_to_repo_dirs(services, airflow_services, var, repo_dir, must_hold):
    problems = []
    for name in airflow_services:
        value = env(services[name]).get(var)
        if value is None or not PurePosixPath(value).is_relative_to(REPO_MOUNT):
            problems.append(f"{name}: {var} = {value!r} is not under the repo mount {REPO_MOUNT}")
            continue
        host = repo_path(services[name], value)
        if host != (REPO / repo_dir).resolve() or not host.is_dir():
            problems.append(f"{name}: {var} = {value!r} should be the repo's {repo_dir}/ (got {host})")
        elif must_hold and not (host / must_hold).is_file():
            problems.append(f"{name}: {var} = {value!r}: {repo_dir}/ holds no {must_hold}")
    fail_on(problems)


def test_airflow_talks_to_the_stack(services, airflow_services):
    problems = []
    for name in airflow_services:
        e = env(services[name])
        check_postgres_uri(services, f"{name}: AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
                           e.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", ""), problems)
        api = urlparse(e.get("AIRFLOW__CORE__EXECUTION_API_SERVER_URL", ""))
        server = resolves(services, api.hostname)
        if server is None or words(services[server])[:2] != ["airflow", "api-server"]:
            problems.append(f"{name}: AIRFLOW__CORE__EXECUTION_API_SERVER_URL {api.geturl()!r} does not name the "
                            "api-server service")
        elif str(api.port) != (option(words(services[server]), "--port", "-p") or "8080"):
            problems.append(f"{name}: AIRFLOW__CORE__EXECUTION_API_SERVER_URL port {api.port} is not {server}'s")
        driver = e.get("TAILFILL_SPARK_DRIVER_HOST")
        runner = resolves(services, driver)
        if driver is not None and (runner is None or words(services[runner])[:2] != ["airflow", "scheduler"]):
            # LocalExecutor: tasks, hence spark-submit's client-mode driver, run in the scheduler
            problems.append(f"{name}: TAILFILL_SPARK_DRIVER_HOST {driver!r} is not the scheduler service's name")
        if not e.get("AIRFLOW__API_AUTH__JWT_SECRET"):
            problems.append(f"{name}: AIRFLOW__API_AUTH__JWT_SECRET must be set (and shared), or task tokens fail")
    fail_on(problems)


def test_airflow_login_users_have_passwords_on_a_writable_path(services, airflow_services):
    problems = []
    for name in airflow_services:
        svc, e = services[name], env(services[name])
        users = [u.split(":")[0] for u in e.get("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "").split(",") if u]
        target = e.get("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE", "")
        m = mount_of(svc, target)
        if not target or (m is not None and m.read_only):
            # the auth manager opens it with "a+" at start and "r+" on login: a read-only file kills the API
            problems.append(f"{name}: AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE {target!r} must be writable")
        source = repo_path(svc, e.get("TAILFILL_AIRFLOW_PASSWORDS", ""))
        if source is None or not source.is_file():
            problems.append(f"{name}: TAILFILL_AIRFLOW_PASSWORDS must name the repo's passwords file")
            continue
        passwords = json.loads(source.read_text())
        problems += [f"{name}: user {u!r} of AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS has no password in "
                     f"{source.relative_to(REPO)}" for u in users if u not in passwords]
    entrypoint = (REPO / "deploy/airflow/entrypoint.sh").read_text()
    if not all(v in entrypoint for v in ("TAILFILL_AIRFLOW_PASSWORDS", "SIMPLE_AUTH_MANAGER_PASSWORDS_FILE")):
        problems.append("deploy/airflow/entrypoint.sh does not copy TAILFILL_AIRFLOW_PASSWORDS to the passwords file")
    fail_on(problems)


# ------------------------------------------------------------------------------------------ Spark


def test_spark_services_share_one_image_and_environment(compose, services, spark_services):
    problems = image_differences(compose, services, spark_services, SPARK_ANCHOR)
    problems += [f"{name}: {var} = {env(services[name]).get(var)!r}, the contract says {value!r}"
                 for name in spark_services for var, value in SHARED_CONTRACT.items()
                 if env(services[name]).get(var) != value]
    fail_on(problems)


def test_spark_default_connection_is_the_master(services, airflow_services):
    master = with_command(services, "org.apache.spark.deploy.master.Master")
    worker = with_command(services, "org.apache.spark.deploy.worker.Worker")
    port = option(words(services[master]), "--port", "-p") or env(services[master]).get("SPARK_MASTER_PORT", "7077")
    problems = []
    for name in airflow_services:
        conn = urlparse(env(services[name]).get("AIRFLOW_CONN_SPARK_DEFAULT", ""))
        if conn.scheme != "spark" or resolves(services, conn.hostname) != master:
            problems.append(f"{name}: AIRFLOW_CONN_SPARK_DEFAULT {conn.geturl()!r} does not name {master}")
        elif str(conn.port) != port:
            problems.append(f"{name}: AIRFLOW_CONN_SPARK_DEFAULT port {conn.port} is not {master}'s {port}")
    urls = [w for w in words(services[worker]) if w.startswith("spark://")]
    if urls != [f"spark://{master}:{port}"]:
        problems.append(f"{worker}: joins {urls}, not spark://{master}:{port}")
    fail_on(problems)


def test_driver_and_executors_run_the_same_python(services, airflow_services, spark_services):
    problems = []
    bases = {}
    for name in (airflow_services[0], spark_services[0]):
        build = services[name]["build"]
        dockerfile = (REPO / build.get("context", ".") / build.get("dockerfile", "Dockerfile")).read_text()
        bases[name] = re.findall(r"^FROM\s+(\S+)", dockerfile, flags=re.MULTILINE)[-1]
        if not re.search(r"^ENV\s.*SPARK_HOME=", dockerfile, flags=re.MULTILINE):
            problems.append(f"{name}: its Dockerfile does not set SPARK_HOME")
    if len(set(bases.values())) != 1:
        problems.append(f"driver and executor images differ in base (Python must match): {bases}")
    fail_on(problems)


PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
DEPENDENCIES_FROM_PYPROJECT = "['project']['dependencies']"  # how an image turns pyproject.toml into a list


def pip_installs(dockerfile: str) -> list[list[str]]:
    """The arguments of every ``pip install`` in the Dockerfile's RUN instructions."""
    runs = re.findall(r"^RUN\s+((?:.*\\\n)*.*)$", dockerfile, flags=re.MULTILINE)
    return [shlex.split(args) for run in runs
            for args in re.findall(r"\bpip install\s+([^&;|]*)", run.replace("\\\n", " "))]


def test_images_install_what_pyproject_pins(services, airflow_services, spark_services):
    """Driver image: the project with its ``airflow`` extra; executor image: exactly its dependencies, not it."""
    problems = []
    psycopg = [d for d in PYPROJECT["dependencies"] if d.startswith("psycopg2")]
    if not psycopg:
        problems.append("pyproject.toml: no psycopg2 dependency (the compose catalog and Airflow URIs use psycopg2)")
    for name, role in ((airflow_services[0], "driver"), (spark_services[0], "executor")):
        build = services[name]["build"]
        path = REPO / build.get("context", ".") / build.get("dockerfile", "Dockerfile")
        dockerfile = path.read_text()
        where = f"{name}: {path.relative_to(REPO)}"
        installs = pip_installs(dockerfile)
        if not installs:
            problems.append(f"{where}: no pip install")
        project, requirement_files = [], []
        for args in installs:
            it = iter(args)
            for arg in it:
                if arg in ("-r", "--requirement"):
                    requirement_files.append(next(it, ""))
                elif arg.startswith("-"):
                    continue
                elif arg.startswith(str(REPO_MOUNT)):
                    project.append(arg)
                else:
                    problems.append(f"{where}: installs {arg!r}, which is not from pyproject.toml (declare it there)")
        extras = {e for arg in project for e in re.findall(r"\[([^]]*)\]", arg) for e in e.split(",")}
        if unknown := extras - set(PYPROJECT.get("optional-dependencies", {})):
            problems.append(f"{where}: extras {sorted(unknown)} are not in pyproject.toml")
        for req in requirement_files:
            made = re.search(rf"{DEPENDENCIES_FROM_PYPROJECT}.*>\s*{re.escape(req)}", dockerfile.replace("\\\n", " "))
            if made is None:
                problems.append(f"{where}: {req} is not written from pyproject.toml's [project] dependencies")
        if role == "driver" and (not project or "airflow" not in extras):
            problems.append(f"{where}: the driver image must install the project with its airflow extra")
        if role == "executor":
            if project:
                problems.append(f"{where}: the executor image installs tailfill itself ({project}); jobs ship "
                                "their code with --py-files, the image must hold only the dependencies")
            if not requirement_files:
                problems.append(f"{where}: the executor image does not install pyproject.toml's dependencies")
    fail_on(problems)


# ----------------------------------------------------------------- the compose pipeline, resolved


@pytest.fixture
def compose_demo(monkeypatch, services):
    """deploy/compose/pipelines/demo.yaml loaded in the scheduler's environment (where tasks run)."""
    scheduler_env = env(services["airflow-scheduler"])
    path = repo_path(services["airflow-scheduler"], scheduler_env["TAILFILL_PIPELINES"]) / "demo.yaml"
    for var in re.findall(r"\$\{(\w+)", path.read_text()):
        monkeypatch.delenv(var, raising=False)  # only what compose sets may resolve
    for var, value in scheduler_env.items():
        monkeypatch.setenv(var, str(value))
    return load_pipeline(path)


def test_compose_pipeline_reaches_kafka(services, compose_demo):
    problems = []
    for address in compose_demo.source.bootstrap_servers.split(","):
        host, _, port = address.rpartition(":")
        broker = resolves(services, host)
        if broker is None:
            problems.append(f"TAILFILL_BOOTSTRAP_SERVERS: {host!r} is not a service")
            continue
        e = env(services[broker])
        advertised = dict(
            (listener, url) for listener, _, url in
            (a.partition("://") for a in e.get("KAFKA_ADVERTISED_LISTENERS", "").split(",") if a)
        )
        bound = {listener: url.rpartition(":")[2] for listener, _, url in
                 (a.partition("://") for a in e.get("KAFKA_LISTENERS", "").split(",") if a)}
        protocols = dict(p.split(":") for p in e.get("KAFKA_LISTENER_SECURITY_PROTOCOL_MAP", "").split(",") if p)
        match = [listener for listener, url in advertised.items() if url == f"{host}:{port}"]
        if not match:
            problems.append(f"TAILFILL_BOOTSTRAP_SERVERS: {broker} advertises no listener at {address} "
                            f"(KAFKA_ADVERTISED_LISTENERS: {advertised})")
            continue
        listener = match[0]
        if bound.get(listener) != port:
            problems.append(f"{broker}: listener {listener} is advertised on {port} but KAFKA_LISTENERS binds "
                            f"{bound.get(listener)}")
        if protocols.get(listener, listener) != compose_demo.source.security.protocol:
            problems.append(f"{broker}: listener {listener} speaks {protocols.get(listener)}, the pipeline "
                            f"{compose_demo.source.security.protocol}")
    init = with_command(services, "kafka-topics.sh")
    argv = words(services[init])
    if (option(argv, "--topic"), option(argv, "--partitions")) != (compose_demo.source.topic,
                                                                   str(compose_demo.source.partitions)):
        problems.append(f"{init}: creates topic {option(argv, '--topic')} with {option(argv, '--partitions')} "
                        f"partitions; the pipeline expects {compose_demo.source.topic} with "
                        f"{compose_demo.source.partitions}")
    if option(argv, "--bootstrap-server") != compose_demo.source.bootstrap_servers:
        problems.append(f"{init}: --bootstrap-server differs from TAILFILL_BOOTSTRAP_SERVERS")
    fail_on(problems)


def test_compose_pipeline_warehouse_is_the_minio_bucket(services, compose_demo):
    problems = []
    target = compose_demo.target
    init = with_command(services, "mc mb")
    sh = script(services[init])
    bucket_paths = re.findall(r"mc\s+mb\s+(?:--?\S+\s+)*(\S+)", sh)
    buckets = {p.rstrip("/").split("/")[-1] for p in bucket_paths}
    warehouse = urlparse(target.warehouse)
    if warehouse.scheme != "s3" or warehouse.netloc not in buckets:
        problems.append(f"the pipeline's warehouse {target.warehouse!r} is not in a bucket {init} creates {buckets}")
    if target.s3 is None:
        problems.append("the pipeline has no target.s3 endpoint")
        fail_on(problems)
    endpoint = urlparse(target.s3.endpoint)
    minio = resolves(services, endpoint.hostname)
    if minio is None or not str(services[minio].get("image", "")).startswith("minio/minio"):
        problems.append(f"TAILFILL_S3_ENDPOINT: {endpoint.hostname!r} is not the minio service")
    else:
        api_port = (option(words(services[minio]), "--address") or ":9000").rpartition(":")[2]
        if str(endpoint.port or 80) != api_port:
            problems.append(f"TAILFILL_S3_ENDPOINT: port {endpoint.port} is not {minio}'s S3 port {api_port}")
        aliases = re.findall(r"mc\s+alias\s+set\s+(\S+)\s+(\S+)", sh)
        if not any(url.rstrip("/") == target.s3.endpoint.rstrip("/") for _, url in aliases):
            problems.append(f"{init}: its mc alias {aliases} is not TAILFILL_S3_ENDPOINT {target.s3.endpoint}")
    fail_on(problems)


def test_compose_pipeline_catalog_is_the_iceberg_database(services, compose_demo):
    problems: list[str] = []
    check_postgres_uri(services, "TAILFILL_CATALOG_URI", compose_demo.target.catalog.uri, problems)
    fail_on(problems)


def test_compose_pipeline_state_is_on_the_state_volume(services, compose_demo):
    m = mount_of(services["airflow-scheduler"], compose_demo.checkpoint_location)
    assert m is not None and m.kind == "volume", (
        f"airflow-scheduler: checkpoint_location {compose_demo.checkpoint_location} is not on a named volume")


def test_minio_credentials_reach_airflow_and_spark(services, airflow_services, spark_services, compose_demo):
    s3 = compose_demo.target.s3
    names = (s3.access_key_env, s3.secret_key_env)
    minio = resolves(services, urlparse(s3.endpoint).hostname)
    root = env(services[minio])
    expected = dict(zip(names, (root.get("MINIO_ROOT_USER"), root.get("MINIO_ROOT_PASSWORD")), strict=True))
    problems = [] if all(expected.values()) else [f"{minio}: MINIO_ROOT_USER/MINIO_ROOT_PASSWORD must be set"]
    problems += [f"{name}: {var} = {env(services[name]).get(var)!r} is not {minio}'s root credential"
                 for name in (*airflow_services, *spark_services) for var in names
                 if env(services[name]).get(var) != expected[var]]
    init = with_command(services, "mc mb")
    if {k: env(services[init]).get(k) for k in ("MINIO_ROOT_USER", "MINIO_ROOT_PASSWORD")} != {
            "MINIO_ROOT_USER": root.get("MINIO_ROOT_USER"), "MINIO_ROOT_PASSWORD": root.get("MINIO_ROOT_PASSWORD")}:
        problems.append(f"{init}: MINIO_ROOT_USER/MINIO_ROOT_PASSWORD differ from {minio}'s")
    fail_on(problems)
