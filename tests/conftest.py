"""Shared fixtures: one Apache Kafka broker, one SparkSession and (on demand) one moto S3 server, one SeaweedFS
(S3 and an Iceberg REST catalog), one Postgres server and one Spark standalone cluster per session.

Every server binds a free loopback port and is stopped when the session ends. Each test gets its
own TAILFILL_HOME and its own topic, so tests never see each other's data.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest
import yaml

# Spark's Python workers inherit the environment the JVM started with: set it before any session.
os.environ.update(
    {
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_ACCESS_KEY_ID": "tailfill-test",
        "AWS_SECRET_ACCESS_KEY": "tailfill-test",
        "TAILFILL_TEST_REST_CREDENTIAL": "tailfill-test:tailfill-test",  # SeaweedFS's REST catalog (OAuth)
        # File-based failpoints (tailfill.failpoints.maybe_fail) are armed in here by tests.
        "TAILFILL_FAULT_DIR": tempfile.mkdtemp(prefix="tailfill-faults-"),
    }
)

from tailfill.config import PipelineConfig
from tailfill.dev.broker import EmbeddedBroker, free_port
from tailfill.pipeline.load import load_pipeline

REPO = Path(__file__).resolve().parent.parent


def pytest_addoption(parser):
    parser.addoption("--soak", action="store_true",
                     help="run the fault suite's long soak (50 random SIGKILLs instead of 8)")
    parser.addoption("--soak-kills", type=int, default=50,
                     help="random SIGKILLs in the soak (with --soak; default 50)")
    parser.addoption("--soak-minutes", type=float, default=30.0,
                     help="test_tail_soak: how long each -m soak tail runs (default 30)")
    parser.addoption("--chaos", action="store_true",
                     help="run the chaos soak (test_chaos.py): every part around the job dies while runs go on")
    parser.addoption("--chaos-minutes", type=float, default=30.0, help="the chaos soak's length (default 30)")
    parser.addoption("--chaos-faults", type=int, default=120, help="faults in the chaos soak (default 120)")
    parser.addoption("--demo-settings", action="store_true",
                     help="test_tail_first: the slices and tail batch bounds pipelines/demo.yaml ships")


def pytest_configure(config):
    """Before any worker starts a JVM, the class archive that every Spark driver of the session then maps
    (:mod:`tailfill.run.class_warmup`): without it each of the session's JVMs loads Spark's classes in full until
    some job happens to write it. Not for a run of unit tests alone, which start no JVM."""
    if hasattr(config, "workerinput") or config.option.collectonly or all(
            Path(a.split("::")[0]).resolve().is_relative_to(REPO / "tests" / "unit") for a in config.args):
        return
    from tailfill.run.class_warmup import write_class_archive

    print(write_class_archive(), file=sys.stderr, flush=True)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A fault scenario's outcome rides on its test report, so it reaches the main process under xdist."""
    report = yield
    if call.when == "call":
        from fault_outcomes import take_outcomes

        report.user_properties += [("fault_outcome", o) for o in take_outcomes()]
    return report


def pytest_runtest_logreport(report):
    from fault_outcomes import collect

    collect(value for name, value in report.user_properties if name == "fault_outcome")


def pytest_terminal_summary(terminalreporter, config):
    """The fault suite's scenario × outcome table, when fault scenarios ran (also to build/fault-outcomes.md)."""
    from fault_outcomes import REPORT, markdown

    table = markdown()
    if table is None or hasattr(config, "workerinput"):
        return
    REPORT.parent.mkdir(exist_ok=True)
    REPORT.write_text(table)
    terminalreporter.section("fault suite: scenario × outcome")
    terminalreporter.write(table)
    terminalreporter.write_line(f"(also in {REPORT})")


@pytest.fixture(scope="session")
def soak(request) -> int:
    """The soak's number of random SIGKILLs when ``--soak`` was asked for (``--soak-kills``), else 0."""
    return request.config.getoption("--soak-kills") if request.config.getoption("--soak") else 0


@pytest.fixture(scope="session")
def broker():
    with EmbeddedBroker() as b:
        yield b
        from tailfill.pipeline.executor import close_contexts

        close_contexts()  # their consumers' threads would retry the stopped broker until the process ends


@pytest.fixture(scope="session")
def spark(broker):
    """The one SparkSession; it depends on the broker so that it stops first (its workers hold consumers)."""
    from tailfill.run.spark_session import get_session

    session = get_session()
    yield session
    session.stop()


@pytest.fixture
def registry():
    """A development Schema Registry (Confluent's REST API) on a free loopback port, for one test."""
    from tailfill.dev.registry import DevRegistry

    with DevRegistry() as reg:
        yield reg


@pytest.fixture(scope="session")
def refused_port():
    """A loopback port where nothing listens for the whole test: bound and never listening, so a connection is
    refused at once and no server the session starts meanwhile can take it (a port only found free can be)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


@pytest.fixture(scope="session")
def s3_endpoint():
    """A moto S3 server on loopback with an empty bucket ``tailfill``; yields its endpoint URL."""
    import boto3

    port = free_port()
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id="tailfill-test", aws_secret_access_key="tailfill-test")
    deadline = time.monotonic() + 30
    while True:
        try:
            client.create_bucket(Bucket="tailfill")
            break
        except Exception:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise
            time.sleep(0.2)
    yield endpoint
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(scope="session")
def seaweedfs():
    """SeaweedFS (``weed mini``) on loopback: S3 and an Iceberg REST catalog, started once, stopped at the end."""
    import shutil

    from seaweedfs import SeaweedFS

    base = Path(tempfile.mkdtemp(prefix="tailfill-seaweedfs-"))
    try:
        with SeaweedFS(base) as server:
            yield server
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres():
    """A Postgres server on a free loopback port (databases ``iceberg`` and ``airflow``), stopped at the end.

    Its data directory is outside pytest's private tmp folder: the server runs as the ``postgres``
    user when the tests run as root, and that user must be able to reach it.
    """
    import shutil

    from tailfill.dev.postgres import LocalPostgres

    base = Path(tempfile.mkdtemp(prefix="tailfill-pg-"))
    base.chmod(0o755)
    server = LocalPostgres(base / "data", free_port())  # each test creates its own databases
    try:
        with server:
            yield server
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory, broker):
    """A Spark standalone master and two workers on loopback, whose executors run a Python without tailfill."""
    from spark_cluster import SparkCluster

    with SparkCluster(tmp_path_factory.mktemp("spark-cluster"), workers=2) as cluster:
        yield cluster


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "home"
    monkeypatch.setenv("TAILFILL_HOME", str(path))
    return path


@pytest.fixture
def make_pipeline(tmp_path, broker, home):
    """Write a pipeline YAML (the demo one, on a fresh topic, with ``changes`` applied) and load it."""
    from helpers import write_demo_pipeline

    def make(name: str = "itest", s3_endpoint: str | None = None, catalog_uri: str | None = None,
             rest=None, **changes) -> PipelineConfig:
        target: dict = {}
        if catalog_uri:
            target["target__catalog__uri"] = catalog_uri
        if rest is not None:  # a SeaweedFS: its REST catalog, its S3; a namespace of the test's own
            s3_endpoint = rest.s3_endpoint
            target["target__catalog"] = {"type": "rest", "uri": rest.rest_uri, "warehouse": "s3://warehouse",
                                         "credential_env": "TAILFILL_TEST_REST_CREDENTIAL",
                                         "properties": {"oauth2-server-uri": f"{rest.rest_uri}/v1/oauth/tokens"}}
            target["target__namespace"] = f"ns_{uuid.uuid4().hex[:10]}"
        if s3_endpoint:
            target["target__warehouse"] = f"s3://tailfill/{uuid.uuid4().hex[:8]}/warehouse"
            target["target__s3"] = {"endpoint": s3_endpoint}
        return load_pipeline(write_demo_pipeline(tmp_path / f"{name}.yaml", name, broker.bootstrap_servers,
                                                 **(target | changes)))

    return make


@pytest.fixture
def cdc(home, monkeypatch, tmp_path):
    """The shipped orders_cdc pipeline on a topic of its own (its YAML with ``changes`` applied)."""
    from helpers import set_dotted

    from tailfill.pipeline.handle import open_pipeline

    def make(**changes):
        monkeypatch.setenv("TAILFILL_CDC_TOPIC", f"cdc-{uuid.uuid4().hex[:8]}")
        data = yaml.safe_load((REPO / "pipelines/orders_cdc.yaml").read_text())
        set_dotted(data, changes)
        path = tmp_path / f"cdc-{uuid.uuid4().hex[:6]}.yaml"
        path.write_text(yaml.safe_dump(data))
        pipeline = open_pipeline(load_pipeline(path))
        pipeline.provision_tables()
        return pipeline

    return make


@pytest.fixture
def dag_factory(tmp_path, monkeypatch):
    """The DAG factory module (its planning tasks' functions), with Airflow's home in the test's directory."""
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    monkeypatch.syspath_prepend(str(REPO / "plugins"))
    from tailfill_airflow import dag_factory

    return dag_factory


@pytest.fixture
def arm_fault():
    """Arm ``tailfill.failpoints.maybe_fail(point)`` to fail ``count`` times; disarmed after the test."""
    armed = []

    def arm(point: str, count: int) -> None:
        path = Path(os.environ["TAILFILL_FAULT_DIR"]) / f"fail-{point}"
        path.write_text(str(count))
        armed.append(path)

    yield arm
    for path in armed:
        path.unlink(missing_ok=True)


PAUSE_POINT = "while-writing"  # tailfill.lake.prepare: on the executors, in the middle of a batch


@pytest.fixture
def paused_batches():
    """Every batch pauses on the executors (``tailfill.failpoints.pause``) until ``release()``; disarmed after."""
    folder = Path(os.environ["TAILFILL_FAULT_DIR"])
    files = [folder / f"pause-{PAUSE_POINT}", folder / PAUSE_POINT, folder / f"{PAUSE_POINT}.arrivals",
             folder / f"{PAUSE_POINT}.release"]

    class Paused:
        def arm(self) -> None:
            for f in files:
                f.unlink(missing_ok=True)
            files[0].touch()

        def reached(self) -> bool:
            return files[1].exists()

        def release(self) -> None:
            files[0].unlink(missing_ok=True)
            files[3].touch()

    yield Paused()
    for f in files:
        f.unlink(missing_ok=True)


# --- headless Chromium for the Airflow UI tests (helpers in tests/airflow_ui.py) -------------------

SCREENSHOTS = Path(__file__).resolve().parent.parent / "build" / "e2e-screenshots"


@pytest.fixture
def browser(tmp_path):
    """Headless Chromium via chromedriver; the driver, the browser and its helpers are gone afterwards."""
    from browser import chromium

    with chromium(tmp_path) as driver:
        yield driver


@pytest.fixture
def shot(browser, request):
    """``shot(name)``: a screenshot kept as a test artefact (``build/e2e-screenshots/<test>/<name>.png``),
    checked not blank."""
    taken: list[Path] = []
    folder = SCREENSHOTS / request.node.name
    folder.mkdir(parents=True, exist_ok=True)

    def take(name: str) -> Path:
        path = folder / f"{name}.png"
        assert browser.save_screenshot(str(path)), f"screenshot {path} failed"
        taken.append(path)
        print(f"screenshot: {path}")
        return path

    yield take
    for path in taken:
        assert path.stat().st_size > 10_000, f"{path} looks empty"


@pytest.fixture(scope="module")
def connect_leaves_no_trace():
    """A Spark Connect client in this process turns pyspark's Connect mode on for the whole process
    (``SPARK_CONNECT_MODE_ENABLED``: classic DataFrames then build Connect expressions) and may put Tailfill's
    shipped archive on ``sys.path``. Undone after the module, so the next module's classic session works."""
    import importlib

    env, path, before = dict(os.environ), list(sys.path), set(sys.modules)
    yield
    os.environ.clear()
    os.environ.update(env)
    sys.path[:] = path
    for name in set(sys.modules) - before:
        if ".zip" in str(getattr(sys.modules[name], "__file__", "") or ""):
            del sys.modules[name]
    importlib.invalidate_caches()
