"""Tailfill's code in every server-side Python process of a Spark Connect session, shipped as an artifact.

The client adds the code archive (:func:`tailfill.run.runtime.code_archive`) to its session with
``spark.addArtifacts(zip, pyfile=True)``. Spark (4.1, 4.2) puts a session's pyfile artifacts on the path of
executor tasks of UDFs (``mapInArrow``) and of batch reads, but not of the processes a streaming query
uses: the streaming data source's planner, the executor tasks of streaming reads (on a cluster's
workers), and the ``foreachBatch`` worker. So what the query needs travels through this module, which is
pickled **by value** (:func:`register_by_value`): its objects unpickle in a Python without tailfill, and
:meth:`Code.ensure` puts the archive on ``sys.path`` before the real object (pickled by reference, as
bytes) is loaded — the session's artifact copy when this process can see one, else the bytes it carries,
written once per host to a temporary file named by the code's fingerprint.

Nothing here may import tailfill at module level: this module runs where tailfill is not installed.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

try:  # Spark 4.2's admission control; Spark 4.1 has none (tailfill.source.stream_api, which this may not import)
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
except ImportError:
    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stand-in: Spark 4.1 never calls ``prepareForTriggerAvailableNow`` of a Python source."""

DATA_SOURCE = "tailfill_kafka"


class Code:
    """The code archive by name and fingerprint (its zip comment), carrying its bytes."""

    def __init__(self, archive: Path):
        with zipfile.ZipFile(archive) as zf:
            self.fingerprint = zf.comment.decode() or "unknown"
        self.name = Path(archive).name
        self.data = Path(archive).read_bytes()

    def ensure(self) -> str:
        """Put the archive on ``sys.path`` (once per process); returns where it was found or written."""
        import glob
        import importlib
        import os
        import sys
        import tempfile

        for entry in sys.path:
            if entry.endswith(self.name) and _fingerprint(entry) == self.fingerprint:
                return entry
        for root in _artifact_roots():
            for found in glob.glob(os.path.join(root, "*", self.name)) + glob.glob(os.path.join(root, self.name)):
                if _fingerprint(found) == self.fingerprint:
                    sys.path.insert(0, found)
                    importlib.invalidate_caches()
                    return found
        path = os.path.join(tempfile.gettempdir(), f"tailfill-code-{self.fingerprint}.zip")
        if not os.path.exists(path) or os.path.getsize(path) != len(self.data):
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "wb") as f:
                f.write(self.data)
            os.replace(tmp, path)
        sys.path.insert(0, path)
        importlib.invalidate_caches()
        return path


def _artifact_roots() -> list[str]:
    """Folders where this process's session artifacts may have been fetched (executors' ``userFiles``)."""
    import sys

    roots = set()
    for entry in sys.path:
        if "/userFiles-" in entry:
            end = entry.find("/", entry.index("/userFiles-") + 1)
            roots.add(entry if end < 0 else entry[:end])
    try:
        from pyspark import SparkFiles

        if SparkFiles._root_directory:  # set in executor tasks
            roots.add(SparkFiles._root_directory)
    except Exception:
        pass
    return sorted(roots)


def _fingerprint(path: str) -> str:
    try:
        with zipfile.ZipFile(path) as zf:
            return zf.comment.decode()
    except (OSError, zipfile.BadZipFile):
        return ""


def _loads(code: Code, payload: bytes):
    code.ensure()
    from pyspark import cloudpickle

    return cloudpickle.loads(payload)


def _dumps(obj) -> bytes:
    from pyspark import cloudpickle

    return cloudpickle.dumps(obj)


class ShippedPartition(InputPartition):
    """A partition of the real reader, as bytes (its class is tailfill's)."""

    def __init__(self, payload: bytes):
        super().__init__(None)
        self.payload = payload


class ShippedStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Forwards to tailfill's stream reader, which is unpickled only after :meth:`Code.ensure`."""

    def __init__(self, code: Code, inner):
        self.code = code
        self.payload = _dumps(inner)
        self._inner = inner

    def __getstate__(self):
        return {"code": self.code, "payload": self.payload, "_inner": None}

    def inner(self):
        if self._inner is None:
            self._inner = _loads(self.code, self.payload)
        return self._inner

    def initialOffset(self):
        return self.inner().initialOffset()

    def getDefaultReadLimit(self):
        return self.inner().getDefaultReadLimit()

    def latestOffset(self, start=None, limit=None):
        return self.inner().latestOffset(start, limit)

    def reportLatestOffset(self):
        return self.inner().reportLatestOffset()

    def prepareForTriggerAvailableNow(self):
        return self.inner().prepareForTriggerAvailableNow()

    def partitions(self, start, end):
        return [ShippedPartition(_dumps(p)) for p in self.inner().partitions(start, end)]

    def read(self, partition):
        return self.inner().read(_loads(self.code, partition.payload))

    def commit(self, end):
        return self.inner().commit(end)

    def stop(self):
        return self.inner().stop()


def shipped_data_source(code: Code, ref: str = "tailfill.source.spark_source:KafkaDataSource") -> type[DataSource]:
    """A data source class named ``tailfill_kafka``, pickled by value, that loads ``ref`` from the shipped code."""
    module, _, cls_name = ref.partition(":")

    class ShippedDataSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return DATA_SOURCE

        def _inner(self):
            code.ensure()
            import importlib

            return getattr(importlib.import_module(module), cls_name)(self.options)

        def schema(self):
            return self._inner().schema()

        def reader(self, schema):
            return self._inner().reader(schema)

        def streamReader(self, schema):
            return ShippedStreamReader(code, self._inner().streamReader(schema))

    return ShippedDataSource


class ShippedForeachBatch:
    """A ``foreachBatch`` function whose real function (tailfill's) is unpickled after :meth:`Code.ensure`.

    Unpickled on the server (the ``foreachBatch`` worker reads it before the query goes on to start its source),
    it starts loading the real function at once, in a thread: :meth:`Code.ensure`, unpickling, and the
    function's ``warm()`` if it has one (the imports of its first call). The first batch waits for that load
    instead of doing it, so the imports overlap the query's start (its source's Python processes) rather than
    follow it. A load that failed is done again by the first batch, which raises its error.
    """

    def __init__(self, code: Code, fn, preload: bool = True):
        self.code = code
        self.payload = _dumps(fn)
        self.preload = preload  # False: the first batch loads it (the old way, for comparison)
        self.fn = None
        self._loading = None

    def __getstate__(self):
        return {"code": self.code, "payload": self.payload, "preload": self.preload, "fn": None}

    def __setstate__(self, state):
        import threading

        self.__dict__.update(state)
        self._loaded, self._loading = None, None
        if self.preload:
            self._loading = threading.Thread(target=self._load, name="tailfill-load", daemon=True)
            self._loading.start()

    def _load(self) -> None:
        try:
            fn = _loads(self.code, self.payload)
            warm = getattr(fn, "warm", None)
            if callable(warm):
                warm()
            self._loaded = fn
        except BaseException:  # the first batch loads it again, and fails with its error
            self._loaded = None

    def __call__(self, df, batch_id):
        if self.fn is None:
            if self._loading is not None:
                self._loading.join()
                self.fn, self._loading = self._loaded, None
            if self.fn is None:
                self.fn = _loads(self.code, self.payload)
        return self.fn(df, batch_id)


def register_by_value() -> None:
    """Have cloudpickle send this module's classes by value (the server may not have tailfill)."""
    import sys

    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
